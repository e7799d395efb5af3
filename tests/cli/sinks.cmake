# Attention sinks from a file (--sinks): run --check against the float64 textbook with the sinks,
# dense and ragged; grad writes their gradient (--dsinks) and reports it in --json; a wrong count
# is refused naming the sinks. Included from CMakeLists.txt (uses first_hour's kattn_cli_expect).
kattn_cli_npy(sinks4 sinks4.npy f64 4 0.5,-1,2,0.25)
kattn_cli_npy(sinks3 sinks3.npy f32 3 1,2,3)
kattn_cli_expect(run_sinks_check ARGS run --random 2,60,80,4,2,16 --causal --sinks ${DATA}/sinks4.npy --check --json
                 STATUS 0 JSON_ONLY REQUIRES sinks4 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_sinks_check_ragged ARGS run --random-ragged 4,2,16 --q-lens 10,1,0,7 --kv-lens 20,9,3,7 --causal
                 --algo splitkv --sinks ${DATA}/sinks4.npy --check --json STATUS 0 JSON_ONLY REQUIRES sinks4
                 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(grad_sinks ARGS grad --random 1,30,30,4,2,8 --causal --dtype f64 --sinks ${DATA}/sinks4.npy
                 --dsinks ${DATA}/dsinks4.npy --check --json STATUS 0 JSON_ONLY REQUIRES sinks4
                 REMOVE ${DATA}/dsinks4.npy FILES ${DATA}/dsinks4.npy
                 STDOUT "\"dsinks\":\\[[-0-9.e]+,[-0-9.e]+,[-0-9.e]+,[-0-9.e]+\\].*\"check\":\"pass\"")
kattn_cli_expect(run_sinks_wrong_count ARGS run --random 1,8,8,4,2,8 --sinks ${DATA}/sinks3.npy STATUS 2 ONE_LINE
                 REQUIRES sinks3 STDERR "sinks: expected one logit per query head \\(4\\), got 3")
kattn_cli_expect(grad_dsinks_without_sinks ARGS grad --random 1,8,8,4,2,8 --dsinks ${DATA}/dsinks_none.npy STATUS 2
                 ONE_LINE STDERR "--dsinks: the gradient of the sinks given with --sinks")

# grad --check compares dsinks with the textbook's too (issue 56), by the rule of dq, dk, dv: dense,
# ragged (summed over the sequences) and under --dist; a sampled check says it cannot.
set(DSINKS_CHECKED "\"dsinks_max_abs_err\":[-0-9.e]+,\"dsinks_rel_err\":[-0-9.e]+.*\"check\":\"pass\"")
kattn_cli_expect(grad_dsinks_check ARGS grad --random 2,30,40,4,2,8 --window 6,3 --sinks random --check --json
                 STATUS 0 JSON_ONLY STDOUT "${DSINKS_CHECKED}")
kattn_cli_expect(grad_dsinks_check_text ARGS grad --random 1,30,30,4,2,8 --causal --dtype f64
                 --sinks ${DATA}/sinks4.npy --check STATUS 0 REQUIRES sinks4
                 STDOUT "check dsinks vs float64 textbook backward: max abs err [0-9.]+e-(1[0-9]|[2-9][0-9]), rel err")
kattn_cli_expect(grad_dsinks_check_ragged ARGS grad --random-ragged 4,2,16 --q-lens 10,1,0,7 --kv-lens 20,9,3,7
                 --causal --sinks ${DATA}/sinks4.npy --check --json STATUS 0 JSON_ONLY REQUIRES sinks4
                 STDOUT "\"dsinks\":\\[.*${DSINKS_CHECKED}")
kattn_cli_expect(grad_dsinks_sampled ARGS grad --random 1,30,30,4,2,8 --sinks ${DATA}/sinks4.npy --check-rows 8
                 STATUS 0 REQUIRES sinks4 STDOUT "check: not compared: dsinks \\(a sampled check compares rows")
if(KATTN_ENABLE_MPI)  # a one-rank MPI job started without mpiexec (first_hour.cmake's environment for it)
  kattn_cli_expect(grad_dsinks_check_dist ARGS grad --dist ring --random 1,16,24,4,2,8 --causal --sinks random
                   --check --json STATUS 0 JSON_ONLY STDOUT "${DSINKS_CHECKED}")
  set_tests_properties(cli.grad_dsinks_check_dist PROPERTIES ENVIRONMENT "${_fh_mpi_env}")
endif()
