# kattn-scale's figure and CSV: the figure's structure (separate speedup and efficiency panels per
# kind of study, ideal-scaling lines, error bars from the repetitions, legend under the panels,
# nothing outside the canvas; see check_svg.cmake), every repetition kept in the CSV, and older
# one-row-per-run CSVs still read (report and --from-csv).
set(_scale_data ${CMAKE_CURRENT_SOURCE_DIR}/data)
function(kattn_svg_check name svg)
  add_test(NAME cli.${name}_svg COMMAND ${CMAKE_COMMAND} -DSVG=${svg} ${ARGN} -P ${CMAKE_CURRENT_SOURCE_DIR}/check_svg.cmake)
  set_tests_properties(cli.${name}_svg PROPERTIES FIXTURES_REQUIRED ${name})
  set_tests_properties(cli.${name} PROPERTIES FIXTURES_SETUP ${name})
endfunction()

# Three repetitions per point, weak and strong: medians, spreads and speedups in the table;
# four panels and a bar at every point of both panels in the figure.
kattn_cli_test(scale_plot_repetitions PROGRAM kattn-scale ARGS report --csv ${_scale_data}/scale_repetitions.csv --plot ${DATA}/scale_reps.svg
               PASS "weak ring f32 causal zigzag, 16384 tokens/rank \\| 2 \\| 32768 \\| 16384 \\| 2.15 \\|( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|) 0.949 \\| 1-rank \\| 1.898 \\| 3 \\| 2.1 \\| 2.3 \\|.*strong ring f32 causal zigzag, 65536 tokens \\| 16 \\| 65536 \\| 4096 \\| 1.6 \\|( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|) 0.629 \\| 1-rank \\| 10.060 \\| 3 \\| 1.5 \\| 1.8 \\|.*\\(2 studies, 9 points\\)")
kattn_svg_check(scale_plot_repetitions ${DATA}/scale_reps.svg -DSERIES=2 -DPOINTS=9 -DPANELS=4 -DERRORBARS=18)
# Old (one row per run) and new files in one report: the old points get no bars.
kattn_cli_test(scale_plot_mixed PROGRAM kattn-scale ARGS report --csv ${_scale_data}/scale_synthetic.csv,${_scale_data}/scale_repetitions.csv
               --plot ${DATA}/scale_mixed.svg PASS "weak ring f32 causal zigzag, 65536 tokens/rank \\| 8 \\| 524288 \\| 65536 \\|( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|) 0.800 \\| 1-rank \\| 6.400 \\| 1 \\| 100 \\| 100 \\|.*\\(4 studies, 16 points\\)")
kattn_svg_check(scale_plot_mixed ${DATA}/scale_mixed.svg -DSERIES=4 -DPOINTS=16 -DPANELS=4 -DERRORBARS=18)
# No one-rank run: the CSV's own efficiency, an empty speedup panel that says why.
kattn_cli_test(scale_plot_no_baseline PROGRAM kattn-scale ARGS report --csv ${_scale_data}/scale_no_baseline.csv --plot ${DATA}/scale_nb.svg
               PASS "4 \\| 8192 \\| 2048 \\|( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|)( [^|]+ \\|) 0.800 \\| busy \\|  \\| 1 \\|")
kattn_svg_check(scale_plot_no_baseline ${DATA}/scale_nb.svg -DSERIES=1 -DPOINTS=2 -DPANELS=2 -DERRORBARS=0)
# A model up to 1024 ranks: one column (weak only), thinned tick labels, still inside the canvas.
add_test(NAME cli.scale_plot_model_clean COMMAND ${CMAKE_COMMAND} -E rm -f ${DATA}/scale_model.csv)
set_tests_properties(cli.scale_plot_model_clean PROPERTIES FIXTURES_SETUP scale_plot_model_clean)
kattn_cli_test(scale_plot_model_csv PROGRAM kattn-scale ARGS model --tokens 65536 --heads 8,8 --dim 128 --tflops-per-rank 400
               --causal --max-ranks 1024 --csv ${DATA}/scale_model.csv PASS "1024 +67108864")
set_tests_properties(cli.scale_plot_model_csv PROPERTIES FIXTURES_REQUIRED scale_plot_model_clean
                     FIXTURES_SETUP scale_plot_model_csv)
kattn_cli_test(scale_plot_model PROGRAM kattn-scale ARGS report --csv ${DATA}/scale_model.csv --plot ${DATA}/scale_model.svg
               PASS "\\(1 studies, 11 points\\)")
set_tests_properties(cli.scale_plot_model PROPERTIES FIXTURES_REQUIRED scale_plot_model_csv)
kattn_svg_check(scale_plot_model ${DATA}/scale_model.svg -DSERIES=1 -DPOINTS=11 -DPANELS=2 -DERRORBARS=0)

# --from-csv takes, per shard size, the median of the work over the compute's CPU time (the wall
# compute time in old CSVs that have no CPU time): old: 0.05 TFLOP/s x 10 s / 10 s, one size; new:
# one rate per tokens per rank, 65536: the median over the rows of that size.
kattn_cli_test(scale_from_old_csv PROGRAM kattn-scale ARGS model --from-csv ${_scale_data}/scale_synthetic.csv --tokens 65536
               --causal --max-ranks 2 PASS "kernel rate per rank: 0.05 TFLOP/s")
kattn_cli_test(scale_from_new_csv PROGRAM kattn-scale ARGS model --from-csv ${_scale_data}/scale_repetitions.csv --tokens 65536
               --causal --max-ranks 2 PASS "kernel rate per rank: 4096 tokens/rank: 0.06579 TFLOP/s, .* 65536 tokens/rank: 0.1046 TFLOP/s")

# A measured run (a one-rank MPI job, started without mpiexec) writes one row per repetition.
if(KATTN_ENABLE_MPI)
  add_test(NAME cli.scale_plot_measured COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:kattn-scale> -DCSV=${DATA}/scale_measured.csv
                                                -DSVG=${DATA}/scale_measured.svg
                                                -P ${CMAKE_CURRENT_SOURCE_DIR}/scale_repetitions.cmake)
  set(_scale_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_PROC_BIND=false")
  if(KATTN_SANITIZE)
    list(APPEND _scale_env "ASAN_OPTIONS=detect_leaks=0")  # Open MPI's components leak at exit
  endif()
  set_tests_properties(cli.scale_plot_measured PROPERTIES ENVIRONMENT "${_scale_env}" TIMEOUT 120)
endif()

# A rank count below 1 would break the log axes: refused, naming the file and line.
kattn_cli_test(scale_plot_bad_ranks PROGRAM kattn-scale ARGS report --csv ${_scale_data}/scale_bad_ranks.csv WILL_FAIL
               FAIL "scale_bad_ranks.csv:2: expected a rank count >= 1, got '0'")
