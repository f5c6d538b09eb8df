# Finds the interpreter the Python module is built for, its headers and
# pybind11; sets TAPSTREAM_PYTHON_FOUND. The module and its tests use this one
# interpreter (Python3_EXECUTABLE, which may also be given on the command line).
#
# Without a choice given, the first python3 on PATH that imports numpy, else
# the first python3 at all: a PATH may lead to a pyenv or virtualenv Python
# without numpy while the system's (Debian's python3-numpy, from
# tools/install-deps.sh) has it, and the tests need numpy.
if(NOT DEFINED Python3_EXECUTABLE)
  set(tapstream_python_candidates)
  string(REPLACE ":" ";" tapstream_path_dirs "$ENV{PATH}")
  foreach(dir ${tapstream_path_dirs} /usr/bin)
    if(EXISTS "${dir}/python3" AND NOT "${dir}/python3" IN_LIST tapstream_python_candidates)
      list(APPEND tapstream_python_candidates "${dir}/python3")
    endif()
  endforeach()
  foreach(candidate ${tapstream_python_candidates})
    execute_process(COMMAND ${candidate} -c "import numpy" RESULT_VARIABLE numpy_missing
                    OUTPUT_QUIET ERROR_QUIET)
    if(numpy_missing EQUAL 0)
      set(Python3_EXECUTABLE ${candidate} CACHE FILEPATH "The Python the module is built for")
      break()
    endif()
  endforeach()
  if(NOT DEFINED Python3_EXECUTABLE)
    message(WARNING "No python3 on PATH imports numpy: the Python module's tests need it "
                    "(python3-numpy, tools/install-deps.sh)")
  endif()
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
  # pybind11 uses the Python found above (its FindPython mode).
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
if(Python3_FOUND AND pybind11_FOUND)
  set(TAPSTREAM_PYTHON_FOUND ON)
  message(STATUS "Python module for ${Python3_EXECUTABLE} (${Python3_VERSION}), pybind11 ${pybind11_VERSION}")
  # The module is a shared object: the libraries it links are built position independent.
  set_property(TARGET tapstream_dsp tapstream_app PROPERTY POSITION_INDEPENDENT_CODE ON)
else()
  set(TAPSTREAM_PYTHON_FOUND OFF)
  message(STATUS "Python module not built: needs python3-dev and pybind11-dev "
                 "(tools/install-deps.sh) or -DTAPSTREAM_PYTHON=OFF")
endif()
