# axon_feature(NAME FOUND DEFAULT DOC): an optional part of the build, chosen by
# the cache variable NAME: AUTO (the default: built when its dependencies are
# found, i.e. when DEFAULT is true), ON (built, or a configure error when FOUND
# is false) or OFF. Sets NAME to ON or OFF in the caller's scope.
#
# Why AUTO rather than option(NAME "" ${found}): an option caches what was
# found at the first configure, so a build folder configured before the
# packages were installed (`make demo`, then `make test`, which installs the
# PyTorch packages) kept the feature off for ever, and its tests were skipped
# without a word.
function(axon_feature name found default doc)
  set(${name} AUTO CACHE STRING "${doc}: AUTO (when found), ON or OFF")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  set(choice "${${name}}")
  string(TOUPPER "${choice}" choice)
  if(choice STREQUAL "AUTO")
    if(default)
      set(resolved ON)
    else()
      set(resolved OFF)
    endif()
  elseif(choice MATCHES "^(ON|YES|TRUE|Y|1)$")
    set(resolved ON)
  elseif(choice MATCHES "^(OFF|NO|FALSE|N|0)$")
    set(resolved OFF)
  else()
    message(FATAL_ERROR "${name}='${${name}}': expected AUTO, ON or OFF")
  endif()
  set(${name} ${resolved} PARENT_SCOPE)
endfunction()
