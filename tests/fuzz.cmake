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

# The engine sequence fuzzer (fuzz_engine_seq.c): adversarial sizes and call orders on the host device, seeds in
# tests/fuzz_engine_seq/ (binary programs, see the file's opening comment for their layout).
add_executable(fuzz_engine_seq fuzz_engine_seq.c)
target_link_libraries(fuzz_engine_seq PRIVATE zoffload_static)
if(ZO_FUZZ_LIBFUZZER)
  target_compile_definitions(fuzz_engine_seq PRIVATE ZO_LIBFUZZER=1)
  target_link_options(fuzz_engine_seq PRIVATE -fsanitize=fuzzer)
endif()
if(NOT ZO_SANITIZE)
  add_test(NAME fuzz_engine_seq_smoke COMMAND fuzz_engine_seq -runs=300 -timeout=20
           ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_engine_seq)
  set_tests_properties(fuzz_engine_seq_smoke PROPERTIES LABELS "unit;fuzz" TIMEOUT 120
                       ENVIRONMENT "TMPDIR=${CMAKE_CURRENT_BINARY_DIR}")
endif()

# The checkpoint reader (manifest, latest, zo-train's app_state) and the safetensors writer/reader round trip:
# libFuzzer targets like fuzz_config, else fuzz_driver.h's deterministic main(); their seeds come from a real
# checkpoint and a real export each target makes at start-up.
add_executable(fuzz_checkpoint fuzz_checkpoint.c ${CMAKE_SOURCE_DIR}/tools/zo-train/ckpt.c)
target_include_directories(fuzz_checkpoint PRIVATE ${CMAKE_SOURCE_DIR}/tools/zo-train)
add_executable(fuzz_safetensors fuzz_safetensors.c)
foreach(t fuzz_checkpoint fuzz_safetensors)
  target_link_libraries(${t} PRIVATE zoffload_static PkgConfig::JANSSON)
  if(ZO_FUZZ_LIBFUZZER)
    target_compile_definitions(${t} PRIVATE ZO_LIBFUZZER=1)
    target_link_options(${t} PRIVATE -fsanitize=fuzzer)
  endif()
  if(NOT ZO_SANITIZE)
    add_test(NAME ${t}_smoke COMMAND ${t} -runs=1000 -timeout=10)
    set_tests_properties(${t}_smoke PROPERTIES LABELS "unit;fuzz" TIMEOUT 120)
  endif()
endforeach()
