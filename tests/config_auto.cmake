# "auto" config values resolved from what the application knows, as the HF Trainer does.
zo_add_test(test_config_auto SOURCES test_config_auto.c LABELS unit ARGS ${CMAKE_CURRENT_SOURCE_DIR}/configs/hf_zero3_nvme.json)
add_test(NAME zo_train_hf_auto
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_hf_auto.sh $<TARGET_FILE:zo-train>
                 ${CMAKE_CURRENT_SOURCE_DIR}/configs/hf_zero3_nvme.json /usr/share/games/fortunes)
set_tests_properties(zo_train_hf_auto PROPERTIES LABELS "unit;nvme" TIMEOUT 120)
