# Checkpoints (zoffload/checkpoint.h) through zo-train: exact resume on every tier, crash safety under
# SIGKILL, a full disk, and the safetensors export read back by the safetensors Python package.
set(ZO_TINY ${CMAKE_CURRENT_SOURCE_DIR}/configs/tiny.json)
set(ZO_CORPUS /usr/share/games/fortunes)
add_test(NAME zo_train_resume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_resume.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
set_tests_properties(zo_train_resume PROPERTIES LABELS "unit;nvme" TIMEOUT 300)
add_test(NAME zo_train_crash
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_crash.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS} 60)
set_tests_properties(zo_train_crash PROPERTIES LABELS "slow" TIMEOUT 300)
add_test(NAME zo_train_ckpt_diskfull
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_ckpt_diskfull.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
set_tests_properties(zo_train_ckpt_diskfull PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77 TIMEOUT 120)
add_test(NAME zo_train_safetensors
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_safetensors.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
set_tests_properties(zo_train_safetensors PROPERTIES LABELS "unit;python" SKIP_RETURN_CODE 77 TIMEOUT 120)
# The start-up budget's refusal of each tier (zoffload/budget.h), before anything is allocated.
zo_add_test(test_budget SOURCES test_budget.c LABELS unit ARGS ${CMAKE_CURRENT_BINARY_DIR})
# The 1e9-parameter zo-stepbench command with DeepSpeed's default sub_group_size: refused in seconds.
add_test(NAME zo_stepbench_budget
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_stepbench_budget.sh $<TARGET_FILE:zo-stepbench>
                 ${CMAKE_CURRENT_BINARY_DIR}/stepbench-budget)
set_tests_properties(zo_stepbench_budget PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77 TIMEOUT 120)
# zo_engine_save / zo_engine_load at the API: exact continuation, app_state, keep_last, every error.
zo_add_test(test_checkpoint SOURCES test_checkpoint.c LABELS unit ARGS ${CMAKE_CURRENT_BINARY_DIR})
if(ZO_HAVE_CUDA) # the same on the cuda backend against the stand-in runtime, device memory not host-accessible
  add_dependencies(test_checkpoint fake_cudart)
  add_test(NAME test_checkpoint_fakecuda COMMAND test_checkpoint --backend cuda ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_checkpoint_fakecuda PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/fake_cudart;FAKE_CUDA_DEVICE_NOACCESS=1")
endif()
# A checkpoint read as untrusted input (counters, loss scale, FIFOs, escaped bytes) and --keep-last removing only
# its own checkpoints, through zo-train in three-step runs of the tiny model.
add_test(NAME zo_train_ckpt_validate
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_ckpt_validate.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
set_tests_properties(zo_train_ckpt_validate PROPERTIES LABELS "unit" TIMEOUT 300)
# Temporary files of saves and exports never open or follow what is planted at their names, and never replace
# anything but a regular file; one run per checkpoint root (zo_checkpoint_lock), leftovers only of gone processes.
zo_add_test(test_ckpt_tmpfiles SOURCES test_ckpt_tmpfiles.c LABELS unit ARGS ${CMAKE_CURRENT_BINARY_DIR})
zo_add_test(test_ckpt_lock SOURCES test_ckpt_lock.c LABELS unit ARGS ${CMAKE_CURRENT_BINARY_DIR})
# zo-train's side: planted links at .latest.tmp and OUT.tmp, --export-safetensors to a link, FIFO, directory or
# device and a `latest` that is a link refused at start-up; 20 rounds of two runs on one --save root (one refused
# naming the other, nothing lost), leftovers of a gone process removed and of a live one kept.
add_test(NAME zo_train_tmpfiles
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_tmpfiles.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
add_test(NAME zo_train_root_lock
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zo_train_root_lock.sh $<TARGET_FILE:zo-train> ${ZO_TINY} ${ZO_CORPUS})
set_tests_properties(zo_train_tmpfiles zo_train_root_lock PROPERTIES LABELS "unit" TIMEOUT 180)
# The Python front: _write_atomic steps around planted links and refuses non-regular targets; save_checkpoint() in a
# second process on one root is refused naming the first (the same C lock).
add_test(NAME python_ckpt_files COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python_tests.sh $<TARGET_FILE:zoffload>
         ${CMAKE_SOURCE_DIR} test_ckpt_files.py)
set_tests_properties(python_ckpt_files PROPERTIES LABELS "unit;python" SKIP_RETURN_CODE 77 TIMEOUT 120)
# A save killed (SIGKILL) at each of its stages and at 50 random moments, with a reused tag and per-step tags:
# every load afterwards is one whole checkpoint, the old or the new, with its own caller's file (zo_save_opts.files).
zo_add_test(test_ckpt_kill SOURCES test_ckpt_kill.c LABELS unit ARGS ${CMAKE_CURRENT_BINARY_DIR})
