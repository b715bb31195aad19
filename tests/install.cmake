# The installed library as a user consumes it: find_package(zoffload) and pkg-config from a temporary prefix.
add_test(NAME install_consumer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(install_consumer PROPERTIES LABELS "unit" TIMEOUT 180)
