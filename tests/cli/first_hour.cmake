# A new user's first hour: --check at any length, non-finite outputs, the threads notice, --layout,
# output paths checked first, progress, kattn's own --help, --json alone on stdout, --repeat, and
# the smaller refusals. Included from CMakeLists.txt (KATTN_BIN, DATA, kattn_cli_npy defined).
set(FH ${DATA}/fh)
function(kattn_cli_expect name)
  cmake_parse_arguments(T "JSON_ONLY;ONE_LINE;SERIAL_ONLY" "STATUS;STDOUT;STDOUT_NOT;STDERR;STDERR_NOT;PROGRAM"
                        "ARGS;FILES;REMOVE;REQUIRES;SAME" ${ARGN})
  set(bin ${KATTN_BIN})
  if(T_PROGRAM)
    set(bin $<TARGET_FILE:${T_PROGRAM}>)
  endif()
  add_test(NAME cli.${name}
           COMMAND ${CMAKE_COMMAND} -DBIN=${bin} "-DARGS=${T_ARGS}" "-DSTATUS=${T_STATUS}" "-DSTDOUT=${T_STDOUT}"
                   "-DSTDOUT_NOT=${T_STDOUT_NOT}" "-DSTDERR=${T_STDERR}" "-DSTDERR_NOT=${T_STDERR_NOT}"
                   "-DFILES=${T_FILES}" "-DREMOVE=${T_REMOVE}" "-DSAME=${T_SAME}" -DJSON_ONLY=${T_JSON_ONLY} -DONE_LINE=${T_ONE_LINE}
                   -DSERIAL_ONLY=${T_SERIAL_ONLY} -P ${CMAKE_CURRENT_SOURCE_DIR}/expect.cmake)
  if(T_REQUIRES)
    set_tests_properties(cli.${name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
  endif()
endfunction()
add_test(NAME cli.setup.fh_dir COMMAND ${CMAKE_COMMAND} -E make_directory ${FH})
set_tests_properties(cli.setup.fh_dir PROPERTIES FIXTURES_SETUP fh_dir)

# 1. --check at any length: a sample of rows, each exact in float64, when asked or when the full
# reference's 12000 x 12000 scores (1.15 GB) do not fit its 1 GiB; the output is written first.
kattn_cli_expect(check_rows ARGS run --random 1,300,300,2,1,16 --causal --window 20,-1 --check-rows 30 --json
                 STATUS 0 JSON_ONLY STDOUT "\"check_mode\":\"sampled\",\"checked_rows\":3[0-9],\"total_rows\":600.*\"check\":\"pass\"")
kattn_cli_expect(check_long ARGS run --random 1,12000,12000,1,1,64 --causal --check --out ${FH}/o_long.npy
                 STATUS 0 REMOVE ${FH}/o_long.npy FILES ${FH}/o_long.npy REQUIRES fh_dir
                 STDOUT "check vs float64 reference, checked [0-9]+ of 12000 rows exactly in float64.*rel err [0-9.]+e-0[6-9]")
kattn_cli_expect(check_rows_ragged ARGS run --random-ragged 4,2,16 --q-lens 40,1,0,70 --kv-lens 50,9,3,60 --causal
                 --algo splitkv --check-rows 10 --json STATUS 0
                 STDOUT "\"check_mode\":\"sampled\".*\"total_rows\":444.*\"check\":\"pass\"")
kattn_cli_expect(check_rows_paged ARGS run --random 2,5,300,4,2,16 --page-size 7 --shuffle-pages --window 30,2
                 --algo splitkv --check-rows 5 --json STATUS 0 STDOUT "\"check_mode\":\"sampled\".*\"check\":\"pass\"")
# grad --check at any length: the textbook backward's two 9000 x 9000 arrays (1.3 GB) do not fit
# its 1 GiB, so dq rows and dk, dv key rows are checked exactly; the same sample when asked on a
# ragged batch; a sample cannot take a block mask (refused before the work).
kattn_cli_expect(grad_check_long ARGS grad --random 1,9000,9000,1,1,64 --causal --check --dk ${FH}/dk_long.npy
                 STATUS 0 REMOVE ${FH}/dk_long.npy FILES ${FH}/dk_long.npy REQUIRES fh_dir
                 STDOUT "check dq vs float64 textbook backward, checked 64 of 9000 query rows exactly in float64.*check dk vs float64 textbook backward, checked 64 of 9000 key rows.*check dv")
kattn_cli_expect(grad_check_rows ARGS grad --random 2,40,50,4,2,16 --window 6,2 --softcap 5 --dtype f64 --check-rows 12
                 --json STATUS 0 JSON_ONLY
                 STDOUT "\"dk_rel_err\":[0-9.]+e-1[3-9].*\"check_mode\":\"sampled\",\"checked_rows\":[0-9]+,\"checked_key_rows\":[0-9]+.*\"check\":\"pass\"")
kattn_cli_expect(grad_check_rows_ragged ARGS grad --random-ragged 4,2,16 --q-lens 40,1,0,70 --kv-lens 50,9,3,60
                 --causal --check-rows 10 --json STATUS 0 JSON_ONLY
                 STDOUT "\"check_mode\":\"sampled\".*\"check\":\"pass\"")
kattn_cli_expect(grad_check_rows_mask ARGS grad --random 1,64,64,1,1,8 --pattern local:1 --mask-block 16 --check-rows 8
                 STATUS 2 ONE_LINE STDOUT_NOT "." STDERR "--check-rows: a sampled check does not take a block mask")

# 2. Non-finite outputs: NaN in q gives NaN rows, as in the reference: reported, the check passes;
# scores past float32's range (1e20 x 1e20) give NaN where the float64 reference has numbers: exit 3,
# and --out is written all the same.
kattn_cli_npy(fh_q f32.npy f32 1,16,2,8 random)
kattn_cli_npy(fh_q_nan q_nan.npy f32 1,16,2,8 random:nan=3)
kattn_cli_npy(fh_q_big q_big.npy f32 1,16,2,8 random:scale=1e20)
set(FH_KV --k ${DATA}/f32.npy --v ${DATA}/f32.npy)
kattn_cli_expect(check_nan_in_q ARGS run --q ${DATA}/q_nan.npy ${FH_KV} --check STATUS 0 REQUIRES fh_q fh_q_nan
                 STDOUT "check: 8 non-finite values in o, in the same places as the reference's")
kattn_cli_expect(check_nonfinite_fails ARGS run --q ${DATA}/q_big.npy --k ${DATA}/q_big.npy --v ${DATA}/f32.npy --check
                 --json --out ${FH}/o_nan.npy STATUS 3 REMOVE ${FH}/o_nan.npy FILES ${FH}/o_nan.npy
                 REQUIRES fh_dir fh_q fh_q_big JSON_ONLY STDOUT "\"o_nonfinite\":[1-9][0-9]*,.*\"check\":\"fail\""
                 STDERR "--check failed: [0-9]+ non-finite values where the float64 reference differs")

# 3. One plain notice when Kokkos runs on fewer cores than it could (Debian's Serial-only Kokkos),
# in a field under --json, not at all under --quiet; plan says it too.
kattn_cli_expect(notice_serial SERIAL_ONLY ARGS run --random 1,9,9,1,1,4 --kokkos-num-threads=2 STATUS 0
                 STDERR "^kattn: this Kokkos has only the Serial backend, so kattn runs on one core.*mpiexec -n 2 kattn run --dist ring.*OpenMP.*\n$")
kattn_cli_expect(notice_json SERIAL_ONLY ARGS run --random 1,9,9,1,1,4 --kokkos-num-threads=2 --json STATUS 0
                 JSON_ONLY STDOUT "\"notice\":\"this Kokkos has only the Serial backend" STDERR_NOT "Serial backend")
kattn_cli_expect(notice_quiet SERIAL_ONLY ARGS run --random 1,9,9,1,1,4 --kokkos-num-threads=2 --quiet STATUS 0
                 STDERR_NOT ".")
kattn_cli_expect(notice_plan SERIAL_ONLY ARGS plan --batch 1 --kv-len 4096 --heads 8,8 --head-dim 64 STATUS 0
                 STDERR "only the Serial backend")

# 4. --layout: bhnd files ([B, H, N, D], PyTorch's) read and written as such; a shape that looks
# transposed (256 "heads" of 4 positions) gets a warning naming --layout bhnd.
# The same random problem in both layouts: lse ([B, H, N] in both) must come out the same bytes.
kattn_cli_expect(layout_save ARGS run --random 1,40,50,4,2,8 --layout bhnd --save-inputs ${FH}/bhnd --out ${FH}/bhnd/o.npy
                 --lse ${FH}/bhnd/lse_random.npy STATUS 0 STDOUT "layout=bhnd B=1 Nq=40 Nk=50 Hq=4 Hkv=2"
                 REMOVE ${FH}/bhnd FILES ${FH}/bhnd/q.npy REQUIRES fh_dir)
set_tests_properties(cli.layout_save PROPERTIES FIXTURES_SETUP fh_bhnd)
kattn_cli_expect(layout_read ARGS run --q ${FH}/bhnd/q.npy --k ${FH}/bhnd/k.npy --v ${FH}/bhnd/v.npy --layout bhnd
                 --check --json --lse ${FH}/bhnd/lse_files.npy STATUS 0 REQUIRES fh_bhnd JSON_ONLY
                 SAME ${FH}/bhnd/lse_random.npy ${FH}/bhnd/lse_files.npy
                 STDOUT "\"dims\":\"bhnd\",\"shape\":\\[1,40,50,4,2,8\\].*\"check\":\"pass\"")
kattn_cli_expect(layout_grad ARGS grad --q ${FH}/bhnd/q.npy --k ${FH}/bhnd/k.npy --v ${FH}/bhnd/v.npy
                 --do ${FH}/bhnd/q.npy --layout bhnd --check --json STATUS 0 REQUIRES fh_bhnd
                 STDOUT "\"shape\":\\[1,40,50,4,2,8\\].*\"check\":\"pass\"")
kattn_cli_npy(fh_torch torch_q.npy f32 1,4,256,8 random)
kattn_cli_expect(layout_warning ARGS run --q ${DATA}/torch_q.npy --k ${DATA}/torch_q.npy --v ${DATA}/torch_q.npy
                 STATUS 0 REQUIRES fh_torch
                 STDERR "warning: --q .*torch_q.npy \\[1, 4, 256, 8\\] read as bnhd gives 256 heads of 4 positions.*--layout bhnd")
kattn_cli_expect(layout_no_warning ARGS run --q ${FH}/bhnd/q.npy --k ${FH}/bhnd/k.npy --v ${FH}/bhnd/v.npy --layout bhnd
                 STATUS 0 REQUIRES fh_bhnd STDERR_NOT "warning")
kattn_cli_expect(layout_bad ARGS run --random 1,2,2,1,1,4 --layout nhd STATUS 2 ONE_LINE
                 STDERR "--layout: expected bnhd \\(\\[B, N, H, D\\]\\) or bhnd")

# 5. Every output path checked (or its directory created) before any work: exit 2, nothing computed.
kattn_cli_expect(out_missing_dir ARGS run --random 1,8,8,1,1,4 --out /nonexistent-kattn/o.npy STATUS 2 ONE_LINE
                 STDOUT_NOT "." STDERR "^kattn: --out /nonexistent-kattn/o.npy: no directory /nonexistent-kattn to write it in\n$")
kattn_cli_expect(lse_is_dir ARGS run --random 1,8,8,1,1,4 --lse ${CMAKE_CURRENT_SOURCE_DIR} STATUS 2 ONE_LINE STDOUT_NOT "."
                 STDERR "--lse .*: is a directory, expected a file name")
kattn_cli_expect(grad_dq_missing_dir ARGS grad --random 1,8,8,1,1,4 --dv /nonexistent-kattn/dv.npy STATUS 2 ONE_LINE
                 STDOUT_NOT "." STDERR "--dv /nonexistent-kattn/dv.npy: no directory")
kattn_cli_expect(scale_model_csv_missing_dir PROGRAM kattn-scale ARGS model --tokens 4096 --tflops-per-rank 1
                 --csv /nonexistent-kattn/s.csv STATUS 2 ONE_LINE STDOUT_NOT "."
                 STDERR "^kattn: --csv /nonexistent-kattn/s.csv: no directory /nonexistent-kattn to write it in\n$")
kattn_cli_expect(scale_report_plot_missing_dir PROGRAM kattn-scale ARGS report --csv ${CMAKE_CURRENT_SOURCE_DIR}/data/scale_synthetic.csv
                 --plot /nonexistent-kattn/p.svg STATUS 2 ONE_LINE STDOUT_NOT "." STDERR "--plot /nonexistent-kattn/p.svg: no directory")
if(KATTN_ENABLE_MPI)  # a one-rank MPI job started without mpiexec: refused before the first repetition
  kattn_cli_expect(scale_run_csv_missing_dir PROGRAM kattn-scale ARGS measure --tokens 256 --dim 16 --csv /nonexistent-kattn/s.csv STATUS 2
                   ONE_LINE STDOUT_NOT "." STDERR "--csv /nonexistent-kattn/s.csv: no directory /nonexistent-kattn")
  set(_fh_mpi_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_PROC_BIND=false")
  if(KATTN_SANITIZE)
    list(APPEND _fh_mpi_env "ASAN_OPTIONS=detect_leaks=0")  # Open MPI's components leak at exit
  endif()
  set_tests_properties(cli.scale_run_csv_missing_dir PROPERTIES ENVIRONMENT "${_fh_mpi_env}")
endif()
kattn_cli_expect(save_inputs_creates ARGS run --random 1,8,8,1,1,4 --save-inputs ${FH}/new/inputs STATUS 0
                 REMOVE ${FH}/new FILES ${FH}/new/inputs/q.npy REQUIRES fh_dir)

# 6. Progress on standard error (forced here: ctest's stderr is no terminal), off with --quiet; grad
# shows the forward's line, then the backward's, reported from its passes in pieces.
kattn_cli_expect(progress ARGS run --random 1,3000,3000,1,1,32 --causal --progress STATUS 0
                 STDERR "progress: 100.0%, [0-9.]+ GFLOP/s, [0-9]+ s elapsed, 0 s left")
kattn_cli_expect(progress_check ARGS run --random 1,3000,3000,1,1,32 --causal --check --progress STATUS 0
                 STDERR "check against the float64 textbook: 100.0%, [0-9.]+ GFLOP/s, [0-9]+ s elapsed, 0 s left")
kattn_cli_expect(progress_grad ARGS grad --random 1,3000,3000,1,1,32 --causal --progress STATUS 0
                 STDERR "progress: 100.0%, [0-9.]+ GFLOP/s.*progress: [ 0-9.]+%.*progress: 100.0%, [0-9.]+ GFLOP/s, [0-9]+ s elapsed, 0 s left")
kattn_cli_expect(progress_grad_quiet ARGS grad --random 1,3000,3000,1,1,32 --causal --quiet STATUS 0 STDERR_NOT "progress")
kattn_cli_expect(progress_quiet ARGS run --random 1,3000,3000,1,1,32 --causal --quiet STATUS 0 STDERR_NOT "progress")

# 7. kattn's own help first and only; Kokkos' under --kokkos-help.
kattn_cli_expect(help_own ARGS --help STATUS 0 STDOUT "^usage: kattn <command>.*--kokkos-help"
                 STDOUT_NOT "Kokkos command line arguments")
kattn_cli_expect(help_run ARGS run --help STATUS 0 STDOUT "^usage: kattn run.*--layout bnhd\\|bhnd.*--check-rows N"
                 STDOUT_NOT "Kokkos command line arguments")
kattn_cli_expect(help_kokkos ARGS --kokkos-help STATUS 0 STDOUT "Kokkos command line arguments" STDOUT_NOT "usage: kattn")

# 8. --json: one JSON document alone on stdout; shape says what ran (totals for ragged and paged).
kattn_cli_expect(json_alone ARGS run --random 1,20,30,2,1,8 --check --json STATUS 0 JSON_ONLY
                 STDOUT "\"shape\":\\[1,20,30,2,1,8\\],\"shape_is\":\"B,Nq,Nk,Hq,Hkv,D\"")
kattn_cli_expect(json_paged ARGS run --random 2,3,300,4,2,16 --page-size 16 --algo splitkv --json STATUS 0 JSON_ONLY
                 STDOUT "\"shape\":\\[2,6,600,4,2,16\\],\"shape_is\":\"B,total_q,total_kv,Hq,Hkv,D\"")
kattn_cli_expect(json_grad ARGS grad --random 1,20,30,2,1,8 --check --json STATUS 0 JSON_ONLY STDOUT "\"check\":\"pass\"")
kattn_cli_expect(json_version ARGS version --json STATUS 0 JSON_ONLY STDOUT "\"cuda_kernels_used\":false")

# 9. --repeat N: a warm-up, then the median of N calls with min and max; no K+V rate for prefill;
# for grad, of the backward.
kattn_cli_expect(repeat_grad ARGS grad --random 1,64,64,2,1,16 --repeat 3 --json STATUS 0 JSON_ONLY
                 STDOUT "\"seconds\":[0-9.e-]+.*\"repeat\":3,\"seconds_min\":[0-9.e-]+,\"seconds_max\":")
kattn_cli_expect(repeat_grad_ragged ARGS grad --random-ragged 2,1,8 --q-lens 5,9 --kv-lens 7,9 --repeat 2 STATUS 0
                 STDOUT "time: backward [0-9.]+ s \\(median of 2 calls after a warm-up; min")
kattn_cli_expect(repeat ARGS run --random 1,64,64,2,1,16 --repeat 3 --json STATUS 0 JSON_ONLY
                 STDOUT "\"seconds\":[0-9.e-]+.*\"repeat\":3,\"seconds_min\":[0-9.e-]+,\"seconds_max\":")
kattn_cli_expect(repeat_text ARGS run --random 1,64,64,2,1,16 --repeat 3 STATUS 0
                 STDOUT "median of 3 calls after a warm-up; min [0-9.]+ s, max [0-9.]+ s")
kattn_cli_expect(prefill_no_kv_rate ARGS run --random 1,100,100,1,1,8 STATUS 0 STDOUT "GFLOP/s" STDOUT_NOT "K\\+V read")
kattn_cli_expect(decode_kv_rate ARGS run --random 2,1,300,4,1,16 STATUS 0 STDOUT "K\\+V read at")

# 10. The smaller ones.
kattn_cli_npy(fh_k16 k16.npy f32 1,16,2,16 random)
kattn_cli_npy(fh_q64 q64.npy f64 1,16,2,8 random)
kattn_cli_expect(v_head_dim ARGS run --q ${DATA}/f32.npy --k ${DATA}/f32.npy --v ${DATA}/k16.npy STATUS 2 ONE_LINE
                 REQUIRES fh_q fh_k16 STDERR "--v .*k16.npy: expected head dim 8 \\(from q and k\\), got 16")
kattn_cli_expect(k_head_dim ARGS run --q ${DATA}/f32.npy --k ${DATA}/k16.npy --v ${DATA}/f32.npy STATUS 2 ONE_LINE
                 REQUIRES fh_q fh_k16 STDERR "--k .*k16.npy: expected head dim 8 \\(from q\\), got 16")
kattn_cli_expect(input_is_dir ARGS run --q ${CMAKE_CURRENT_SOURCE_DIR} ${FH_KV} STATUS 2 ONE_LINE REQUIRES fh_q
                 STDERR "--q .*: is a directory, expected an .npy file")
kattn_cli_expect(missing_file_flag ARGS run --q ${DATA}/f32.npy --k /nonexistent/k.npy --v ${DATA}/f32.npy STATUS 2
                 ONE_LINE REQUIRES fh_q STDERR "--k /nonexistent/k.npy: cannot open file")
kattn_cli_expect(mixed_dtypes ARGS run --q ${DATA}/f32.npy --k ${DATA}/q64.npy --v ${DATA}/f32.npy STATUS 2 ONE_LINE
                 REQUIRES fh_q fh_q64 STDERR "--k .*q64.npy: <f8 data, but q is <f4; give every input in one dtype")
kattn_cli_expect(mixed_dtypes_given ARGS run --q ${DATA}/f32.npy --k ${DATA}/q64.npy --v ${DATA}/f32.npy --dtype f64
                 STATUS 0 REQUIRES fh_q fh_q64 STDOUT "dtype=f64")
kattn_cli_expect(zigzag_needs_ring ARGS run --random 1,8,8,1,1,4 --zigzag STATUS 2 ONE_LINE
                 STDERR "--zigzag: needs --dist ring")
kattn_cli_expect(chunk_needs_dist ARGS grad --random 1,8,8,1,1,4 --chunk 4 STATUS 2 ONE_LINE STDERR "--chunk: needs --dist ring")
kattn_cli_expect(q_lens_needs_ragged ARGS run --random 1,8,8,1,1,4 --q-lens 3 STATUS 2 ONE_LINE
                 STDERR "--q-lens: needs --random-ragged")
kattn_cli_expect(version_cuda ARGS --version STATUS 0
                 STDOUT "CUDA kernels compiled: (yes|no); used by the kattn commands: no")
kattn_cli_expect(kokkos3_threads ARGS run --random 1,9,9,1,1,4 --json --kokkos-threads=1 STATUS 0 STDOUT "\"threads\":1")
kattn_cli_expect(grad_ragged ARGS grad --random-ragged 4,2,16 --q-lens 5,0,9,1 --kv-lens 7,3,9,0 --causal --check --json
                 STATUS 0 JSON_ONLY STDOUT "\"layout\":\"ragged\".*\"shape\":\\[4,15,19,4,2,16\\].*\"check\":\"pass\"")
kattn_cli_expect(grad_ragged_f64 ARGS grad --random-ragged 4,2,16 --q-lens 5,0,9,1 --kv-lens 7,3,9,0 --dtype f64
                 --window 3,1 --softcap 2 --check --dq ${FH}/dq_ragged.npy STATUS 0 REQUIRES fh_dir
                 REMOVE ${FH}/dq_ragged.npy FILES ${FH}/dq_ragged.npy
                 STDOUT "check dv vs float64 textbook backward: max abs err [0-9.]+e-1[3-9]")
kattn_cli_expect(grad_ragged_files ARGS grad --q ${DATA}/q3.npy --k ${DATA}/kr.npy --v ${DATA}/kr.npy
                 --q-indptr ${DATA}/q_indptr.npy --kv-indptr ${DATA}/kv_indptr.npy --do ${DATA}/q3.npy --check STATUS 0
                 REQUIRES q3 kr q_indptr kv_indptr STDOUT "ragged batch of 2 sequences, 4 queries, 10 keys.*check dq")
kattn_cli_expect(grad_ragged_needs_do ARGS grad --q ${DATA}/q3.npy --k ${DATA}/kr.npy --v ${DATA}/kr.npy
                 --q-indptr ${DATA}/q_indptr.npy --kv-indptr ${DATA}/kv_indptr.npy STATUS 2 ONE_LINE
                 REQUIRES q3 kr q_indptr kv_indptr STDERR "--do: give DO.npy \\[total_q, Hq, D\\]")
# Cascade: a shared prefix once for all requests, each request's suffix, merged; checked row by
# row against attention over prefix + suffix.
kattn_cli_expect(cascade ARGS run --cascade --random-ragged 4,2,16 --q-lens 3,1,5 --kv-lens 4,2,7 --random-prefix 50
                 --causal --dtype f64 --check --json STATUS 0 JSON_ONLY
                 STDOUT "\"algo\":\"cascade\".*\"prefix_keys\":50.*\"checked_rows\":36,\"total_rows\":36.*\"max_abs_err\":[0-9.]+e-1[3-9].*\"check\":\"pass\"")
kattn_cli_expect(cascade_needs_prefix ARGS run --cascade --random-ragged 4,2,16 --q-lens 3 --kv-lens 4 STATUS 2 ONE_LINE
                 STDERR "--random-prefix: random requests take a random prefix")
