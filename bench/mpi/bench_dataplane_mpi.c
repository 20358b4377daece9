/* The peer of bench_dataplane: OpenMPI's MPI_Allreduce (f32 sum) over the same sizes and
 * iteration counts. Prints "bytes seconds_per_call" lines (best of R sweeps; the time of a
 * sweep is the slowest rank's). Run by bench_dataplane through mpirun. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iters_for(size_t bytes) {
  size_t it = ((size_t)256 << 20) / (bytes + 4096);
  if (it > 2000) it = 2000;
  if (it < 5) it = 5;
  return (int)it;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (64u << 20);
  int runs = argc > 2 ? atoi(argv[2]) : 3;
  size_t maxc = max / 4;
  float *a = malloc(maxc * 4 + 64), *b = malloc(maxc * 4 + 64);
  for (size_t i = 0; i < maxc; i++) a[i] = (float)(rank + 1);
  memset(b, 0, maxc * 4);
  int nsizes = 0;
  while (((size_t)4 << (2 * nsizes)) <= max) nsizes++;
  double *best = calloc(nsizes, sizeof *best);
  for (int run = 0; run < runs; run++)
    for (int s = 0; s < nsizes; s++) {
      size_t bytes = (size_t)4 << (2 * s);
      int count = (int)(bytes / 4), it = iters_for(bytes);
      for (int w = 0; w < 2; w++) MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < it; i++) MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = (MPI_Wtime() - t0) / it, worst;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (run == 0 || worst < best[s]) best[s] = worst;
      if (b[0] != (float)n * (n + 1) / 2) {
        if (rank == 0) fprintf(stderr, "MPI_Allreduce gave %g\n", b[0]);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  if (rank == 0)
    for (int s = 0; s < nsizes; s++) printf("%zu %.9f\n", (size_t)4 << (2 * s), best[s]);
  free(a);
  free(b);
  free(best);
  MPI_Finalize();
  return 0;
}
