/* peakrss.c - runs a command and writes its peak resident memory (KiB) to a file.
 *
 *   peakrss PREFIX CMD ARGS...
 *
 * Writes PREFIX.R, R the MPI rank from the launcher's environment (Open MPI's
 * OMPI_COMM_WORLD_RANK, MPICH's PMI_RANK; 0 without), holding the child's
 * ru_maxrss (wait4), and exits with the child's status: under mpirun each
 * process's peak, for tests/test_mpi.sh's per-stage loading check and
 * bench/stage_memory.sh. Mapped file pages count as resident too. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: peakrss PREFIX CMD ARGS...\n");
        return 2;
    }
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMI_RANK");
    pid_t pid = fork();
    if (pid < 0) {
        perror("peakrss: fork");
        return 1;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("peakrss: wait4");
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", argv[1], r ? r : "0");
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%ld\n", ru.ru_maxrss) < 0 || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
