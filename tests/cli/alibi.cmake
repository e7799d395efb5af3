# ALiBi slopes from a file (--alibi-slopes): run --check against the float64 textbook with the
# bias, dense, split-KV decode and ragged; grad --check; a wrong count is refused naming the
# slopes. Included from CMakeLists.txt (uses first_hour's kattn_cli_expect).
kattn_cli_npy(alibi4 alibi4.npy f64 4 0.5,0,0.125,2)
kattn_cli_npy(alibi3 alibi3.npy f32 3 0.5,0.25,0.125)
kattn_cli_expect(run_alibi_check ARGS run --random 2,60,80,4,2,16 --causal --alibi-slopes ${DATA}/alibi4.npy --check
                 --json STATUS 0 JSON_ONLY REQUIRES alibi4 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_alibi_decode_check ARGS run --random 3,1,300,4,1,32 --algo splitkv --splits 4
                 --alibi-slopes ${DATA}/alibi4.npy --check --json STATUS 0 JSON_ONLY REQUIRES alibi4
                 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_alibi_check_ragged ARGS run --random-ragged 4,2,16 --q-lens 10,1,0,7 --kv-lens 20,9,3,7 --causal
                 --algo splitkv --alibi-slopes ${DATA}/alibi4.npy --check --json STATUS 0 JSON_ONLY REQUIRES alibi4
                 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(grad_alibi ARGS grad --random 1,30,30,4,2,8 --causal --dtype f64 --alibi-slopes ${DATA}/alibi4.npy
                 --check --json STATUS 0 JSON_ONLY REQUIRES alibi4 STDOUT "\"check\":\"pass\"")
kattn_cli_expect(run_alibi_wrong_count ARGS run --random 1,8,8,4,2,8 --alibi-slopes ${DATA}/alibi3.npy STATUS 2
                 ONE_LINE REQUIRES alibi3 STDERR "alibi_slopes: expected one slope per query head \\(4\\), got 3")
