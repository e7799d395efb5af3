# The simulated cluster (perf/cluster, docs/simulated-cluster.md): a small ring attention with --check
# across three network namespaces joined by 0.5 ms links, Open MPI over TCP between them. Needs root
# and Open MPI: elsewhere it reports itself skipped (exit 77). The cleanup fixture takes the cluster
# down even when the test is killed at its timeout; the cluster's switch also removes it after 90 s.
# Included from tests/mpi/CMakeLists.txt (MPIEXEC_EXECUTABLE, kattn-cli, KATTN_MPI_TEST_ENV).
find_program(KATTN_CLUSTER_PYTHON NAMES python3 DOC "python3 for perf/cluster/cluster.py (standard library only)")
if(KATTN_CLUSTER_PYTHON)
  # One cluster name per build tree, so that two build trees' tests on one machine do not meet.
  string(MD5 _kattn_cluster_hash "${PROJECT_BINARY_DIR}")
  string(SUBSTRING "${_kattn_cluster_hash}" 0 8 _kattn_cluster_hash)
  set(_kattn_cluster_name kattn-ct${_kattn_cluster_hash})
  add_test(NAME mpi.cluster.ring_netns
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster_test.sh ${KATTN_CLUSTER_PYTHON} $<TARGET_FILE:kattn-cli>
                   ${MPIEXEC_EXECUTABLE} ${_kattn_cluster_name})
  set_tests_properties(mpi.cluster.ring_netns PROPERTIES TIMEOUT 90 SKIP_RETURN_CODE 77 PROCESSORS 3
                       ENVIRONMENT "${KATTN_MPI_TEST_ENV}" FIXTURES_REQUIRED kattn_cluster RESOURCE_LOCK kattn_cluster)
  add_test(NAME mpi.cluster.cleanup
           COMMAND ${KATTN_CLUSTER_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/cluster.py --name ${_kattn_cluster_name} down --all)
  set_tests_properties(mpi.cluster.cleanup PROPERTIES TIMEOUT 30 FIXTURES_CLEANUP kattn_cluster)
else()
  message(STATUS "kattn: no python3: the simulated-cluster test (perf/cluster) is not registered")
endif()
