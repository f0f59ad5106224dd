# Run at every build (target kveval_git_hash): writes OUT (git_hash.inc) with the
# checkout's short commit hash, "-dirty" appended when tracked files differ from
# it, or "unknown" outside a git checkout. configure_file rewrites the file only
# when the text changes, so an unchanged hash recompiles nothing.
execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE KVEVAL_GIT_HASH OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT KVEVAL_GIT_HASH)
  set(KVEVAL_GIT_HASH "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${SRC} RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty EQUAL 1)
    string(APPEND KVEVAL_GIT_HASH "-dirty")
  endif()
endif()
file(CONFIGURE OUTPUT ${OUT} CONTENT "#define KVEVAL_GIT_HASH \"${KVEVAL_GIT_HASH}\"\n" @ONLY)
