# Finds the interpreter the Python module is built for, its headers and
# pybind11; sets TAPSTREAM_PYTHON_FOUND. The module and its tests use this one
# interpreter (Python3_EXECUTABLE, which may also be given on the command line).
#
# Or, for another Python than this machine runs (the GPU machine's 3.12 from
# a machine with 3.11): TAPSTREAM_PYTHON_INCLUDE_DIR, that Python's header
# folders (Include and the folder of its pyconfig.h), and
# TAPSTREAM_PYTHON_SOABI, its extension suffix without ".so"
# (cpython-312-x86_64-linux-gnu): the module is built against those headers
# and named for that Python, and its tests (which need that interpreter) are
# not registered. Sets TAPSTREAM_PYTHON_CROSS. TAPSTREAM_PYBIND11_INCLUDE_DIR:
# another pybind11's include folder (header-only; Debian 12's 2.10 predates
# NumPy 2's layout of dtypes and Python 3.12, which 2.12 and later handle).
set(TAPSTREAM_PYTHON_INCLUDE_DIR "" CACHE STRING
    "Header folders of the Python to build the module for, instead of this machine's")
set(TAPSTREAM_PYTHON_SOABI "" CACHE STRING
    "Extension suffix of that Python, without .so (e.g. cpython-312-x86_64-linux-gnu)")
set(TAPSTREAM_PYBIND11_INCLUDE_DIR "" CACHE PATH
    "pybind11's include folder for that module (default: the installed pybind11)")
if(TAPSTREAM_PYTHON_INCLUDE_DIR)
  if(NOT TAPSTREAM_PYTHON_SOABI)
    message(FATAL_ERROR "TAPSTREAM_PYTHON_INCLUDE_DIR needs TAPSTREAM_PYTHON_SOABI "
                        "(e.g. cpython-312-x86_64-linux-gnu)")
  endif()
  set(tapstream_python_h "")
  set(tapstream_pyconfig_h "")
  foreach(dir ${TAPSTREAM_PYTHON_INCLUDE_DIR})
    if(EXISTS "${dir}/Python.h")
      set(tapstream_python_h "${dir}/Python.h")
    endif()
    if(EXISTS "${dir}/pyconfig.h")
      set(tapstream_pyconfig_h "${dir}/pyconfig.h")
    endif()
  endforeach()
  if(NOT tapstream_python_h OR NOT tapstream_pyconfig_h)
    message(FATAL_ERROR "TAPSTREAM_PYTHON_INCLUDE_DIR (${TAPSTREAM_PYTHON_INCLUDE_DIR}) must "
                        "hold Python.h and pyconfig.h (Include and the configured build folder)")
  endif()
  add_library(tapstream_pybind11_headers INTERFACE)
  if(TAPSTREAM_PYBIND11_INCLUDE_DIR)
    if(NOT EXISTS "${TAPSTREAM_PYBIND11_INCLUDE_DIR}/pybind11/pybind11.h")
      message(FATAL_ERROR "TAPSTREAM_PYBIND11_INCLUDE_DIR (${TAPSTREAM_PYBIND11_INCLUDE_DIR}) "
                          "holds no pybind11/pybind11.h")
    endif()
    file(STRINGS "${TAPSTREAM_PYBIND11_INCLUDE_DIR}/pybind11/detail/common.h" pybind11_minor
         REGEX "define PYBIND11_VERSION_MINOR")
    string(REGEX REPLACE ".*MINOR +([0-9]+).*" "2.\\1" pybind11_minor "${pybind11_minor}")
    set(pybind11_VERSION "${pybind11_minor} in ${TAPSTREAM_PYBIND11_INCLUDE_DIR}")
    target_include_directories(tapstream_pybind11_headers SYSTEM INTERFACE
                               ${TAPSTREAM_PYBIND11_INCLUDE_DIR})
  else()
    set(PYBIND11_NOPYTHON ON)
    find_package(pybind11 2.6 CONFIG REQUIRED)
    target_link_libraries(tapstream_pybind11_headers INTERFACE pybind11::headers)
  endif()
  set(TAPSTREAM_PYTHON_FOUND ON)
  set(TAPSTREAM_PYTHON_CROSS ON)
  message(STATUS "Python module for the headers in ${TAPSTREAM_PYTHON_INCLUDE_DIR} "
                 "(${TAPSTREAM_PYTHON_SOABI}), pybind11 ${pybind11_VERSION}; its tests not registered")
  set_property(TARGET tapstream_dsp tapstream_app PROPERTY POSITION_INDEPENDENT_CODE ON)
  return()
endif()
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
