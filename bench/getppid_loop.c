// SPDX-License-Identifier: GPL-2.0
/* bench/syscall_tax: N getppid() calls, prints the mean ns per call. getppid does no work of its
 * own, so what a tracer adds to every system call of the host shows undiluted. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000, i;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		syscall(SYS_getppid);	/* not getppid(): libc may cache it */
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
