#include "kattn/distributed/merge_op.hpp"

#include "kattn/distributed/detail/row_merge.hpp"
#include "kattn/distributed/detail/transport.hpp"

namespace kattn {
namespace dist {
namespace {

// inout[r] = in[r] (lower ranks) merged with inout[r], for every row r.
template <class T>
void merge_rows(void* in, void* inout, int* len, MPI_Datatype* type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  const int width = bytes / static_cast<int>(sizeof(T));  // D + 1
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int r = 0; r < *len; ++r)
    detail::merge_finished_rows(a + std::int64_t(r) * width, b + std::int64_t(r) * width, width - 1);
}

// Frees the operator when MPI_COMM_SELF is freed, i.e. at the start of MPI_Finalize.
int free_op(MPI_Comm, int, void* attr, void*) {
  MPI_Op op = *static_cast<MPI_Op*>(attr);
  MPI_Op_free(&op);
  delete static_cast<MPI_Op*>(attr);
  return MPI_SUCCESS;
}

template <class T>
MPI_Op create_op() {
  MPI_Op* op = new MPI_Op;
  MPI_Op_create(&merge_rows<T>, /*commute=*/0, op);
  int key = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_op, &key, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, key, op);
  return *op;
}

}  // namespace

template <class T>
MPI_Op finished_row_merge() {
  static const MPI_Op op = create_op<T>();
  return op;
}

template <class T>
MPI_Datatype finished_row_type(int head_dim) {
  MPI_Datatype t;
  MPI_Type_contiguous(head_dim + 1, detail::mpi_type<T>(), &t);
  MPI_Type_commit(&t);
  return t;
}

template MPI_Op finished_row_merge<float>();
template MPI_Op finished_row_merge<double>();
template MPI_Datatype finished_row_type<float>(int);
template MPI_Datatype finished_row_type<double>(int);

}  // namespace dist
}  // namespace kattn
