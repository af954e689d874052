// Compiles only where MPI's C++ bindings are visible (MPI::Init).
#include <mpi.h>

#include <axonml/distributed.hpp>

int main(int argc, char** argv) {
  MPI::Init(argc, argv);
  const int rank = MPI::COMM_WORLD.Get_rank();
  MPI::Finalize();
  return rank < 0 ? 1 : 0;
}
