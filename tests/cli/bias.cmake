# A bias tensor of the scores (--bias FILE.npy | random): run and grad --check against the float64
# textbook with the same bias (every element type, broadcast dims, a bool mask, block-sparse,
# ragged, paged and cascade inputs); grad writes its gradient (--dbias, float64, the bias's shape);
# the random variants (--sinks random, --alibi-slopes random|standard, --bias random) drawn the
# same from the same --seed; the refusals, naming --bias or the library's `bias:`. Included from
# CMakeLists.txt (uses first_hour's kattn_cli_expect).
kattn_cli_npy(bias_f32 bias_f32.npy f32 2,4,60,80 random)
kattn_cli_npy(bias_bf16 bias_bf16.npy bf16 2,1,60,80 random:scale=3)
kattn_cli_npy(bias_f16 bias_f16.npy f16 1,4,30,30 random)
kattn_cli_npy(bias_f64 bias_f64.npy f64 1,1,30,30 random)
kattn_cli_npy(bias_bool bias_bool.npy b1 1,4,30,40 random)
kattn_cli_npy(bias_bad_shape bias_bad_shape.npy f32 1,4,8,9 random)
kattn_cli_npy(bias_rank3 bias_rank3.npy f32 4,8,8 random)
set(BIAS_DIR ${DATA}/bias)
add_test(NAME cli.setup.bias_dir COMMAND ${CMAKE_COMMAND} -E make_directory ${BIAS_DIR})
set_tests_properties(cli.setup.bias_dir PROPERTIES FIXTURES_SETUP bias_dir)

kattn_cli_expect(run_bias_check ARGS run --random 2,60,80,4,2,16 --causal --bias ${DATA}/bias_f32.npy --check
                 STATUS 0 REQUIRES bias_f32 STDOUT "Hkv=2 D=16 causal bias\n.*check vs float64 reference.*rel err")
kattn_cli_expect(run_bias_bhnd_splitkv ARGS run --random 2,60,80,4,2,16 --layout bhnd --algo splitkv --splits 3
                 --bias ${DATA}/bias_bf16.npy --dtype bf16 --check --json STATUS 0 JSON_ONLY REQUIRES bias_bf16
                 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_bias_bool ARGS run --random 1,30,40,4,2,8 --window 10,10 --bias ${DATA}/bias_bool.npy --check --json
                 STATUS 0 JSON_ONLY REQUIRES bias_bool STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_bias_block_sparse ARGS run --random 1,30,40,4,2,8 --pattern local:1 --mask-block 10
                 --bias ${DATA}/bias_bool.npy --check --json STATUS 0 JSON_ONLY REQUIRES bias_bool
                 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_bias_naive ARGS run --random 1,30,30,4,2,8 --algo naive --dtype f64 --bias ${DATA}/bias_f16.npy
                 --check --json STATUS 0 JSON_ONLY REQUIRES bias_f16 STDOUT "\"check\":\"pass\"")

# grad: --dbias in float64 whatever the bias's type, broadcast dims included.
kattn_cli_expect(grad_bias_dbias ARGS grad --random 1,30,30,4,2,8 --causal --dtype f64 --bias ${DATA}/bias_f16.npy
                 --dbias ${BIAS_DIR}/dbias.npy --check --json STATUS 0 JSON_ONLY REQUIRES bias_f16 bias_dir
                 REMOVE ${BIAS_DIR}/dbias.npy FILES ${BIAS_DIR}/dbias.npy STDOUT "\"check\":\"pass\"")
set_tests_properties(cli.grad_bias_dbias PROPERTIES FIXTURES_SETUP bias_dbias)
add_test(NAME cli.grad_bias_dbias_shape COMMAND ${CMAKE_COMMAND} -DFILE=${BIAS_DIR}/dbias.npy -DDESCR=<f8
                                               "-DSHAPE=1, 4, 30, 30" -P ${CMAKE_CURRENT_SOURCE_DIR}/npy_shape.cmake)
set_tests_properties(cli.grad_bias_dbias_shape PROPERTIES FIXTURES_REQUIRED bias_dbias)
kattn_cli_expect(grad_bias_broadcast ARGS grad --random 1,30,30,4,2,8 --window 5,5 --bias ${DATA}/bias_f64.npy
                 --dbias ${BIAS_DIR}/dbias_broadcast.npy --pattern local:1 --mask-block 10 --check --json STATUS 0
                 JSON_ONLY REQUIRES bias_f64 bias_dir REMOVE ${BIAS_DIR}/dbias_broadcast.npy
                 FILES ${BIAS_DIR}/dbias_broadcast.npy STDOUT "\"check\":\"pass\"")
set_tests_properties(cli.grad_bias_broadcast PROPERTIES FIXTURES_SETUP bias_dbias_broadcast)
add_test(NAME cli.grad_bias_broadcast_shape COMMAND ${CMAKE_COMMAND} -DFILE=${BIAS_DIR}/dbias_broadcast.npy
                                                   -DDESCR=<f8 "-DSHAPE=1, 1, 30, 30"
                                                   -P ${CMAKE_CURRENT_SOURCE_DIR}/npy_shape.cmake)
set_tests_properties(cli.grad_bias_broadcast_shape PROPERTIES FIXTURES_REQUIRED bias_dbias_broadcast)
# grad --check compares dbias (with --dbias) with the textbook's by the rule of dq, dk, dv; under a
# block mask the masked textbook has none, and the check says so.
kattn_cli_expect(grad_dbias_check ARGS grad --random 1,30,30,4,2,8 --causal --dtype f64 --bias ${DATA}/bias_f16.npy
                 --sinks random --dbias ${BIAS_DIR}/dbias_check.npy --check --json STATUS 0 JSON_ONLY
                 REQUIRES bias_f16 bias_dir REMOVE ${BIAS_DIR}/dbias_check.npy
                 STDOUT "\"dsinks_rel_err\":[-0-9.e]+,\"dbias_max_abs_err\":(0|[0-9.]+e-(1[0-9]|[2-9][0-9])),\"dbias_rel_err\":.*\"check\":\"pass\"")
kattn_cli_expect(grad_dbias_check_broadcast ARGS grad --random 2,60,80,4,2,8 --window 5,5 --bias ${DATA}/bias_bf16.npy
                 --dbias ${BIAS_DIR}/dbias_check_bc.npy --check --json STATUS 0 JSON_ONLY REQUIRES bias_bf16 bias_dir
                 REMOVE ${BIAS_DIR}/dbias_check_bc.npy STDOUT "\"dbias_rel_err\":[-0-9.e]+.*\"check\":\"pass\"")
kattn_cli_expect(grad_dbias_block_mask_unchecked ARGS grad --random 1,30,30,4,2,8 --bias ${DATA}/bias_f64.npy
                 --dbias ${BIAS_DIR}/dbias_unchecked.npy --pattern local:1 --mask-block 10 --check STATUS 0
                 REQUIRES bias_f64 bias_dir REMOVE ${BIAS_DIR}/dbias_unchecked.npy
                 STDOUT "check: not compared: dbias \\(the masked textbook backward has none\\)")
kattn_cli_expect(grad_bias_bool ARGS grad --random 1,30,40,4,2,8 --bias ${DATA}/bias_bool.npy --check --json STATUS 0
                 JSON_ONLY REQUIRES bias_bool STDOUT "\"check\":\"pass\"")

# The random variants: --check passes, and the same --seed draws the same values (the same o).
set(BIAS_RANDOM --random 2,60,80,4,2,16 --causal --seed 5 --sinks random --alibi-slopes random --bias random)
kattn_cli_expect(run_random_variants ARGS run ${BIAS_RANDOM} --check --out ${BIAS_DIR}/o_random1.npy STATUS 0
                 REQUIRES bias_dir REMOVE ${BIAS_DIR}/o_random1.npy
                 STDOUT "causal sinks alibi bias\n.*check vs float64 reference.*rel err")
set_tests_properties(cli.run_random_variants PROPERTIES FIXTURES_SETUP bias_random_o)
kattn_cli_expect(run_random_variants_again ARGS run ${BIAS_RANDOM} --out ${BIAS_DIR}/o_random2.npy STATUS 0
                 REQUIRES bias_dir bias_random_o REMOVE ${BIAS_DIR}/o_random2.npy
                 SAME ${BIAS_DIR}/o_random1.npy ${BIAS_DIR}/o_random2.npy)
kattn_cli_expect(grad_random_variants ARGS grad --random 1,40,50,4,2,16 --seed 3 --sinks random --alibi-slopes standard
                 --bias random --check --json STATUS 0 JSON_ONLY STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_random_variants_ragged ARGS run --random-ragged 4,2,16 --q-lens 10,1,0,7 --kv-lens 20,9,3,7
                 --causal --algo splitkv --sinks random --alibi-slopes standard --check --json STATUS 0 JSON_ONLY
                 STDOUT "\"check\":\"pass\"")

# Ragged batches and paged caches: the bias padded to the longest sequence.
kattn_cli_expect(run_bias_ragged_check ARGS run --random-ragged 4,2,16 --q-lens 30,7,0 --kv-lens 30,12,5 --causal
                 --bias ${DATA}/bias_f16.npy --check --json STATUS 0 JSON_ONLY REQUIRES bias_f16
                 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_bias_paged_check ARGS run --random 1,8,8,4,2,8 --page-size 4 --bias random --check --json STATUS 0
                 JSON_ONLY STDOUT "\"check\":\"pass\"")

# Cascades: the bias of each request's prefix + suffix [B or 1, Hq or 1, max Nq, Np + max suffix],
# with ALiBi and sinks, checked against attention over prefix + suffix.
kattn_cli_npy(bias_cascade bias_cascade.npy f32 2,4,3,40 random)
kattn_cli_expect(run_bias_cascade_check ARGS run --cascade --random-ragged 4,2,16 --q-lens 3,1 --kv-lens 4,24
                 --random-prefix 16 --causal --bias ${DATA}/bias_cascade.npy --alibi-slopes standard --sinks random
                 --check --json STATUS 0 JSON_ONLY REQUIRES bias_cascade
                 STDOUT "\"algo\":\"cascade\".*\"checked_rows\":16,\"total_rows\":16.*\"check\":\"pass\"")
kattn_cli_expect(run_bias_cascade_bf16 ARGS run --cascade --random-ragged 4,2,16 --q-lens 3,1 --kv-lens 4,24
                 --random-prefix 16 --dtype bf16 --bias ${DATA}/bias_cascade.npy --alibi-slopes random --check --json
                 STATUS 0 JSON_ONLY REQUIRES bias_cascade STDOUT "\"dtype\":\"bf16\".*\"check\":\"pass\"")

# Refusals: one line, exit status 2, naming --bias, --dbias or the library's bias.
kattn_cli_expect(run_bias_wrong_shape ARGS run --random 1,8,8,4,2,8 --bias ${DATA}/bias_bad_shape.npy STATUS 2 ONE_LINE
                 REQUIRES bias_bad_shape STDERR "bias: expected \\[1 or 1, 4 or 1, 8, 8\\], got \\[1, 4, 8, 9\\]")
kattn_cli_expect(run_bias_rank3 ARGS run --random 1,8,8,4,2,8 --bias ${DATA}/bias_rank3.npy STATUS 2 ONE_LINE
                 REQUIRES bias_rank3 STDERR "--bias .*bias_rank3.npy: expected a rank-4 array")
kattn_cli_expect(run_bias_int ARGS run --random 1,2,1,2,1,4 --bias ${BAD_NPY}/int_q.npy STATUS 2 ONE_LINE
                 STDERR "--bias .*int_q.npy: expected float32, float64, float16, bf16 bits \\(<u2\\) or bool data, got <i4")
kattn_cli_expect(run_bias_ragged ARGS run --random-ragged 4,2,16 --q-lens 8 --kv-lens 8 --bias ${DATA}/bias_bad_shape.npy
                 STATUS 2 ONE_LINE REQUIRES bias_bad_shape
                 STDERR "bias: expected \\[1 or 1, 4 or 1, 8, 8\\] \\(the longest sequence's queries and keys\\), got")
kattn_cli_expect(run_bias_random_ragged ARGS run --random-ragged 4,2,16 --q-lens 8 --kv-lens 8 --bias random STATUS 2
                 ONE_LINE STDERR "--bias random: draws a \\[B, Hq, Nq, Nk\\] bias for --random")
kattn_cli_expect(run_bias_cascade ARGS run --random-ragged 4,2,16 --q-lens 1,1 --kv-lens 8,8 --cascade --random-prefix 16
                 --bias ${DATA}/bias_bad_shape.npy STATUS 2 ONE_LINE REQUIRES bias_bad_shape
                 STDERR "bias: expected \\[2 or 1, 4 or 1, 1, 24\\] \\(the longest request's queries.*got \\[1, 4, 8, 9\\]")
if(KATTN_ENABLE_MPI)  # a one-rank MPI job started without mpiexec (first_hour.cmake's environment for it)
  kattn_cli_expect(run_bias_dist ARGS run --dist grid --random 1,8,8,4,2,8 --bias random STATUS 2 ONE_LINE
                   STDERR "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got grid")
  set_tests_properties(cli.run_bias_dist PROPERTIES ENVIRONMENT "${_fh_mpi_env}")
endif()
kattn_cli_expect(run_sinks_random_files ARGS run --q ${DATA}/f32.npy --k ${DATA}/f32.npy --v ${DATA}/f32.npy
                 --sinks random STATUS 2 ONE_LINE REQUIRES fh_q
                 STDERR "--sinks random: goes with random inputs \\(--random or --random-ragged\\)")
kattn_cli_expect(grad_dbias_without_bias ARGS grad --random 1,8,8,4,2,8 --dbias ${BIAS_DIR}/none.npy STATUS 2 ONE_LINE
                 REQUIRES bias_dir STDERR "--dbias: the gradient of the bias given with --bias")
kattn_cli_expect(grad_dbias_bool ARGS grad --random 1,30,40,4,2,8 --bias ${DATA}/bias_bool.npy
                 --dbias ${BIAS_DIR}/none.npy STATUS 2 ONE_LINE REQUIRES bias_bool bias_dir
                 STDERR "--dbias: a bool --bias \\(a mask\\) has no gradient")
