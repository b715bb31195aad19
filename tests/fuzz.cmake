# The fuzz targets and the sanitizer builds (tests/sanitize.sh). Each target is a libFuzzer target when
# ZO_FUZZ_LIBFUZZER is on (clang, in a tree with -fsanitize=fuzzer-no-link), else fuzz_driver.h's deterministic
# main(); a short deterministic smoke run of each is a test of the normal tree. In a sanitizer tree (ZO_SANITIZE
# set) only the targets are defined; the tests that build those trees are registered in the normal tree only.
option(ZO_FUZZ_LIBFUZZER "the fuzz targets as libFuzzer targets (clang, with -fsanitize=fuzzer-no-link in ZO_SANITIZE)"
       OFF)

# zo_fuzz_target(NAME SOURCES... [LIBS ...] [SMOKE args...]): the target, and NAME_smoke running it with SMOKE args
function(zo_fuzz_target name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS;SMOKE" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_link_libraries(${name} PRIVATE zoffload_static ${F_LIBS})
  if(ZO_FUZZ_LIBFUZZER)
    target_compile_definitions(${name} PRIVATE ZO_LIBFUZZER=1)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  endif()
  if(NOT ZO_SANITIZE)
    add_test(NAME ${name}_smoke COMMAND ${name} ${F_SMOKE})
    set_tests_properties(${name}_smoke PROPERTIES LABELS "unit;fuzz" TIMEOUT 120
                         ENVIRONMENT "TMPDIR=${CMAKE_CURRENT_BINARY_DIR}")
  endif()
endfunction()

# The config parser and what consumes a parsed config; seeds: the repository's configs, and a dictionary.
zo_fuzz_target(fuzz_config SOURCES fuzz_config.c
               SMOKE -runs=200000 -timeout=2 -dict=${CMAKE_CURRENT_SOURCE_DIR}/fuzz_config.dict
                     ${CMAKE_SOURCE_DIR}/configs ${CMAKE_CURRENT_SOURCE_DIR}/config ${CMAKE_CURRENT_SOURCE_DIR}/configs)
# The engine API: adversarial sizes and call orders on the host device, seeds in tests/fuzz_engine_seq/ (binary
# programs, see the file's opening comment for their layout).
zo_fuzz_target(fuzz_engine_seq SOURCES fuzz_engine_seq.c
               SMOKE -runs=300 -timeout=20 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_engine_seq)
# The checkpoint reader (manifest, latest, zo-train's app_state) and the safetensors writer/reader round trip;
# their seeds come from a real checkpoint and a real export each target makes at start-up.
zo_fuzz_target(fuzz_checkpoint SOURCES fuzz_checkpoint.c ${CMAKE_SOURCE_DIR}/tools/zo-train/ckpt.c
               LIBS PkgConfig::JANSSON SMOKE -runs=1000 -timeout=10)
target_include_directories(fuzz_checkpoint PRIVATE ${CMAKE_SOURCE_DIR}/tools/zo-train ${CMAKE_SOURCE_DIR}/models)
zo_fuzz_target(fuzz_safetensors SOURCES fuzz_safetensors.c LIBS PkgConfig::JANSSON SMOKE -runs=1000 -timeout=10)

if(NOT ZO_SANITIZE)
  add_test(NAME sanitize_asan COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sanitize.sh asan ${CMAKE_SOURCE_DIR}
           ${CMAKE_BINARY_DIR})
  set_tests_properties(sanitize_asan PROPERTIES LABELS "sanitize;fuzz" TIMEOUT 900)
  add_test(NAME sanitize_tsan COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sanitize.sh tsan ${CMAKE_SOURCE_DIR}
           ${CMAKE_BINARY_DIR})
  set_tests_properties(sanitize_tsan PROPERTIES LABELS "tsan" TIMEOUT 900)
endif()
