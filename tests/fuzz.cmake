# Config fuzzing and the sanitizer builds (tests/sanitize.sh). In a sanitizer tree (ZO_SANITIZE set) only the
# fuzz target is defined; the tests that build those trees are registered in the normal tree only.
option(ZO_FUZZ_LIBFUZZER "fuzz_config as a libFuzzer target (clang, with -fsanitize=fuzzer-no-link in ZO_SANITIZE)" OFF)
add_executable(fuzz_config fuzz_config.c)
target_link_libraries(fuzz_config PRIVATE zoffload_static)
if(ZO_FUZZ_LIBFUZZER)
  target_compile_definitions(fuzz_config PRIVATE ZO_LIBFUZZER=1)
  target_link_options(fuzz_config PRIVATE -fsanitize=fuzzer)
endif()
if(NOT ZO_SANITIZE)
  # A short deterministic run in the normal build: the mutation driver, no sanitizer.
  add_test(NAME fuzz_config_smoke COMMAND fuzz_config -runs=200000 -timeout=2
           -dict=${CMAKE_CURRENT_SOURCE_DIR}/fuzz_config.dict ${CMAKE_SOURCE_DIR}/configs
           ${CMAKE_CURRENT_SOURCE_DIR}/config ${CMAKE_CURRENT_SOURCE_DIR}/configs)
  set_tests_properties(fuzz_config_smoke PROPERTIES LABELS "unit;fuzz" TIMEOUT 120)
  add_test(NAME sanitize_asan COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sanitize.sh asan ${CMAKE_SOURCE_DIR}
           ${CMAKE_BINARY_DIR})
  set_tests_properties(sanitize_asan PROPERTIES LABELS "sanitize;fuzz" TIMEOUT 900)
  add_test(NAME sanitize_tsan COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sanitize.sh tsan ${CMAKE_SOURCE_DIR}
           ${CMAKE_BINARY_DIR})
  set_tests_properties(sanitize_tsan PROPERTIES LABELS "tsan" TIMEOUT 900)
endif()
