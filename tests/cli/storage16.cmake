# 16-bit storage: --dtype bf16|f16 for run's forward (dense, ragged, paged, cascade; random inputs and
# files) and grad (dense, ragged), the file conventions (float16 as '<f2', bf16 as '<u2' bits), and the
# refusals: --algo naive takes f32/f64 only for now (exit status 2, one line naming --algo; --dist's
# refusal is tested under mpiexec, tests/mpi). Included from CMakeLists.txt after first_hour.cmake
# (kattn_cli_expect, kattn_cli_npy).
kattn_cli_expect(run_bf16_check ARGS run --random 2,65,130,4,2,32 --causal --dtype bf16 --check --json STATUS 0
                 JSON_ONLY STDOUT "\"algo\":\"flash\",\"dtype\":\"bf16\".*\"rel_err\":[0-9.e-]+.*\"check\":\"pass\"")
kattn_cli_expect(run_f16_check_text ARGS run --random 1,40,300,4,1,64 --window 30,0 --softcap 20 --dtype f16 --check
                 STATUS 0 STDOUT "^kattn run: algo=flash dtype=f16 .*check vs float64 reference, all 160 rows")
kattn_cli_expect(run_f16_splitkv_paged ARGS run --random 2,1,3000,16,2,64 --page-size 3 --shuffle-pages --algo splitkv
                 --dtype f16 --check --json STATUS 0
                 STDOUT "\"dtype\":\"f16\".*\"kv_gbs\".*\"layout\":\"paged\".*\"check\":\"pass\"")
kattn_cli_expect(run_bf16_ragged ARGS run --random-ragged 8,2,32 --q-lens 1,0,5,1 --kv-lens 100,7,0,500 --causal
                 --algo splitkv --splits 3 --dtype bf16 --check --json STATUS 0
                 STDOUT "\"dtype\":\"bf16\".*\"layout\":\"ragged\".*\"check\":\"pass\"")
kattn_cli_expect(run_bf16_sampled ARGS run --random 1,200,200,2,2,128 --causal --dtype bf16 --check-rows 20 --json
                 STATUS 0 STDOUT "\"check_mode\":\"sampled\".*\"check\":\"pass\"")
# float16 files from npy_write: the run's type comes from the files.
kattn_cli_npy(q16 f16_q.npy f16 1,20,2,16 random)
kattn_cli_npy(k16 f16_k.npy f16 1,30,1,16 random)
kattn_cli_expect(run_f16_files ARGS run --q ${DATA}/f16_q.npy --k ${DATA}/f16_k.npy --v ${DATA}/f16_k.npy --check --json
                 STATUS 0 REQUIRES "q16;k16" STDOUT "\"dtype\":\"f16\".*\"check\":\"pass\"")
kattn_cli_expect(run_f16_zeros ARGS run --q ${BAD_NPY}/half.npy --k ${BAD_NPY}/half.npy --v ${BAD_NPY}/half.npy
                 --check --json STATUS 0 STDOUT "\"dtype\":\"f16\".*\"max_abs_err\":0,.*\"check\":\"pass\"")
# --cpu-products: each choice passes the check and the JSON names what ran (bf16-dot on a CPU without
# AVX512_BF16 is the emulation, amx on a CPU without AMX its layouts on the dot products); f16 always
# widens; a wrong name is refused naming the flag.
kattn_cli_expect(run_bf16_widened ARGS run --random 1,70,90,4,2,40 --causal --dtype bf16 --cpu-products widened --check
                 --json STATUS 0 JSON_ONLY STDOUT "\"cpu_products\":\"widened\".*\"check\":\"pass\"")
kattn_cli_expect(run_bf16_dot ARGS run --random 1,70,90,4,2,40 --dtype bf16 --cpu-products bf16-dot --check --json
                 STATUS 0 JSON_ONLY STDOUT "\"cpu_products\":\"bf16-dot\".*\"check\":\"pass\"")
kattn_cli_expect(run_amx ARGS run --random 1,70,90,4,2,40 --dtype bf16 --cpu-products amx --check --json
                 STATUS 0 JSON_ONLY STDOUT "\"cpu_products\":\"amx\".*\"check\":\"pass\"")
kattn_cli_expect(run_f16_products ARGS run --random 1,20,20,1,1,16 --dtype f16 --cpu-products bf16-dot --json STATUS 0
                 JSON_ONLY STDOUT "\"cpu_products\":\"widened\"")
kattn_cli_expect(bad_cpu_products ARGS run --random 1,2,2,1,1,4 --cpu-products fast STATUS 2
                 STDERR "--cpu-products: expected auto, widened, bf16-dot or amx, got 'fast'")
# Refusals.
kattn_cli_expect(grad_bf16_check ARGS grad --random 1,70,90,4,2,64 --causal --dtype bf16 --check --json STATUS 0
                 JSON_ONLY STDOUT "\"dtype\":\"bf16\".*\"check\":\"pass\"")
kattn_cli_expect(grad_f16_files ARGS grad --q ${DATA}/f16_q.npy --k ${DATA}/f16_k.npy --v ${DATA}/f16_k.npy
                 --do ${DATA}/f16_q.npy --check --json STATUS 0 REQUIRES "q16;k16"
                 STDOUT "\"dtype\":\"f16\".*\"check\":\"pass\"")
# Ragged grad in 16 bits: GQA, a sequence without keys and one without queries, causal; every
# gradient checked, then sampled rows; paged caches are refused as in f32.
kattn_cli_expect(grad_bf16_ragged ARGS grad --random-ragged 8,2,32 --q-lens 1,0,5,3 --kv-lens 100,7,0,60 --causal
                 --dtype bf16 --check --json STATUS 0 JSON_ONLY
                 STDOUT "\"dtype\":\"bf16\",\"layout\":\"ragged\".*\"check\":\"pass\"")
kattn_cli_expect(grad_f16_ragged_sampled ARGS grad --random-ragged 4,4,64 --q-lens 40,1 --kv-lens 50,300 --window 20,0
                 --softcap 10 --dtype f16 --check-rows 8 --json STATUS 0
                 STDOUT "\"dtype\":\"f16\".*\"check_mode\":\"sampled\".*\"check\":\"pass\"")
# float16 files with index arrays (first_hour's q_indptr, kv_indptr): the run's type from the files,
# dq written in it. No --check: npy_write draws every file from one seed, so q and k agree row for
# row, and dq's cancellation there exceeds the fixed f16 bound (1.0e-3 against 2^-10).
kattn_cli_npy(q3h q3h.npy f16 4,4,8 random)
kattn_cli_npy(krh krh.npy f16 10,2,8 random)
kattn_cli_expect(grad_f16_ragged_files ARGS grad --q ${DATA}/q3h.npy --k ${DATA}/krh.npy --v ${DATA}/krh.npy
                 --q-indptr ${DATA}/q_indptr.npy --kv-indptr ${DATA}/kv_indptr.npy --do ${DATA}/q3h.npy
                 --dq ${DATA}/dq3h.npy --json STATUS 0 REQUIRES "q3h;krh;q_indptr;kv_indptr" REMOVE ${DATA}/dq3h.npy
                 FILES ${DATA}/dq3h.npy STDOUT "\"dtype\":\"f16\",\"layout\":\"ragged\"")
kattn_cli_expect(grad_bf16_paged ARGS grad --random 1,2,10,2,1,8 --page-size 4 --dtype bf16 STATUS 2 ONE_LINE
                 STDERR "kattn grad: ragged batches only")
kattn_cli_expect(naive_bf16 ARGS run --random 1,4,4,1,1,8 --algo naive --dtype bf16 STATUS 2 ONE_LINE
                 STDERR "--algo naive: the textbook algorithm runs in f32 or f64; with --dtype bf16 use flash or splitkv")
# Cascades in 16 bits: a shared prefix and ragged suffixes (GQA, a request without queries, one
# without suffix keys), every row checked against attention over prefix + suffix in float64 on the
# same rounded inputs; from files, float16 takes its type from them and bf16 bits need --dtype bf16,
# and a prefix file of another type than q's is refused unless --dtype says which to compute in.
kattn_cli_expect(cascade_bf16_check ARGS run --cascade --random-ragged 8,2,32 --q-lens 3,0,1,17 --kv-lens 40,7,0,17
                 --random-prefix 50 --causal --dtype bf16 --check --json STATUS 0 JSON_ONLY
                 STDOUT "\"algo\":\"cascade\",\"dtype\":\"bf16\".*\"checked_rows\":168,\"total_rows\":168.*\"check\":\"pass\"")
kattn_cli_expect(cascade_f16_check_text ARGS run --cascade --random-ragged 4,4,64 --q-lens 5,1 --kv-lens 300,9
                 --random-prefix 200 --softcap 20 --dtype f16 --check STATUS 0
                 STDOUT "^kattn run: cascade dtype=f16 2 requests, 6 queries, a shared prefix of 200 keys.*24 of 24 rows")
kattn_cli_npy(kp16 kp16.npy f16 5,2,8 random)
kattn_cli_npy(kp32 kp32.npy f32 5,2,8 random)
kattn_cli_expect(cascade_f16_files ARGS run --cascade --q ${DATA}/q3h.npy --k ${DATA}/krh.npy --v ${DATA}/krh.npy
                 --q-indptr ${DATA}/q_indptr.npy --kv-indptr ${DATA}/kv_indptr.npy --k-prefix ${DATA}/kp16.npy
                 --v-prefix ${DATA}/kp16.npy --check --json --out ${DATA}/o_cascade16.npy
                 --lse ${DATA}/lse_cascade16.npy
                 STATUS 0 REQUIRES "q3h;krh;q_indptr;kv_indptr;kp16"
                 REMOVE "${DATA}/o_cascade16.npy;${DATA}/lse_cascade16.npy"
                 FILES "${DATA}/o_cascade16.npy;${DATA}/lse_cascade16.npy"
                 STDOUT "\"algo\":\"cascade\",\"dtype\":\"f16\".*\"check\":\"pass\"")
kattn_cli_expect(cascade_bf16_from_float16_files ARGS run --cascade --q ${DATA}/q3h.npy --k ${DATA}/krh.npy
                 --v ${DATA}/krh.npy --q-indptr ${DATA}/q_indptr.npy --kv-indptr ${DATA}/kv_indptr.npy
                 --k-prefix ${DATA}/kp32.npy --v-prefix ${DATA}/kp16.npy --dtype bf16 --check --json STATUS 0
                 REQUIRES "q3h;krh;q_indptr;kv_indptr;kp16;kp32" STDOUT "\"dtype\":\"bf16\".*\"check\":\"pass\"")
kattn_cli_expect(cascade_prefix_of_another_type ARGS run --cascade --q ${DATA}/q3h.npy --k ${DATA}/krh.npy
                 --v ${DATA}/krh.npy --q-indptr ${DATA}/q_indptr.npy --kv-indptr ${DATA}/kv_indptr.npy
                 --k-prefix ${DATA}/kp32.npy --v-prefix ${DATA}/kp16.npy STATUS 2 ONE_LINE
                 REQUIRES "q3h;krh;q_indptr;kv_indptr;kp16;kp32"
                 STDERR "--k-prefix .*kp32.npy: <f4 data, but q is <f2; give every input in one dtype")
# Files the program writes and reads back: bf16 bits and float16, bitwise round trips.
add_test(NAME cli.storage16_files COMMAND ${CMAKE_COMMAND} -DBIN=${KATTN_BIN} -DDATA=${DATA}/storage16
                                         -P ${CMAKE_CURRENT_SOURCE_DIR}/storage16_files.cmake)
