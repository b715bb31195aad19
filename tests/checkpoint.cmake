# Checkpoints (zoffload/checkpoint.h) through zo-train: exact resume on every tier, crash safety under
# SIGKILL, a full disk, and the safetensors export read back by the safetensors Python package.
set(ZO_TINY ${CMAKE_CURRENT_SOURCE_DIR}/configs/tiny.json)
set(ZO_CORPUS /usr/share/games/fortunes)
add_test(NAME zo_train_resume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_resume.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
set_tests_properties(zo_train_resume PROPERTIES LABELS "unit;nvme" TIMEOUT 300)
