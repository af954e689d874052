# The folders are layers (README, "How it works"): a test fails when an
# include of src/, include/ or launcher/ points to a layer above its own.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME "layers: every include of src/, include/ and launcher/ points to a layer below"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/layers/check_layers.py ${PROJECT_SOURCE_DIR})
endif()
