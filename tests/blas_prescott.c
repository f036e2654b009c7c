/* blas_prescott.c - loaded with LD_PRELOAD, an OpenBLAS that says it chose
 * Prescott's SSE3 kernels, as an OpenBLAS older than the CPU does
 * (tests/test_blas_core.sh). */
char *openblas_get_corename(void);

char *openblas_get_corename(void) {
    static char name[] = "Prescott";
    return name;
}
