/* omp_for.h - PD_OMP_FOR: the CPU kernels' parallel loops, on nt threads
 * when cond holds, else on the caller alone. Private to the CPU backend.
 *
 * LLVM's libomp (a clang build) keeps a num_threads clause whose region an
 * if clause serialized and hands it to the next region without one:
 * OpenBLAS's, which sizes its work by omp_get_max_threads() and then waits
 * forever for a thread its team of one lacks (a `num_threads(1) if (0)`
 * region, then a threaded sgemm, hangs with LLVM 14's libomp). There the
 * condition goes into the thread count instead; libgomp gets the if clause,
 * its serialized region a direct call.
 */
#ifndef PD_OMP_FOR_H
#define PD_OMP_FOR_H

#ifdef _OPENMP
#include <omp.h>
#define PD_PRAGMA(s) _Pragma(#s)
#if defined(__clang__)
#define PD_OMP_FOR(nt, cond) PD_PRAGMA(omp parallel for num_threads((cond) ? (nt) : 1) schedule(static))
#else
#define PD_OMP_FOR(nt, cond) PD_PRAGMA(omp parallel for num_threads(nt) schedule(static) if (cond))
#endif
#else
#define PD_OMP_FOR(nt, cond) (void)(nt);
#endif

#endif
