# Doxygen input filter for our headers (docs/Doxyfile runs it on *.hpp).
#
# The headers use plain `//` comments (the project style: a paragraph atop each
# header with its contract, a line before each declaration that needs one).
# Doxygen reads only its own comment forms, so this filter rewrites, on the
# fly and without touching the sources:
#   - the comment block that opens the file  -> the file's documentation (@file)
#   - a comment on its own line              -> `///`, documenting what follows
#   - a comment after code on the same line  -> `///<`, documenting that member
# Comments after a closing brace (`}  // namespace x`) are left alone.
# POSIX awk (Debian's mawk) only.

BEGIN { opening = 1 }

function is_comment_line(line) { return line ~ /^[ \t]*\/\/([ \t]|$)/ }

# Number of double quotes in s: odd means `//` sits inside a string literal.
function quotes(s,    n) { n = gsub(/"/, "\"", s); return n }

{
  line = $0
  if (opening) {
    if (is_comment_line(line)) {
      if (!started) { print "/// @file"; started = 1 }
      sub(/\/\//, "///", line)
      print line
      next
    }
    opening = 0
  }
  if (is_comment_line(line)) {
    sub(/\/\//, "///", line)
    print line
    next
  }
  at = index(line, "//")
  if (at > 1) {
    code = substr(line, 1, at - 1)
    rest = substr(line, at + 2)
    if (code ~ /[^ \t]/ && code !~ /^[ \t]*}/ && quotes(code) % 2 == 0 && rest ~ /^[ \t]/) {
      print code "///<" rest
      next
    }
  }
  print line
}
