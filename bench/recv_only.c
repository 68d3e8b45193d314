// SPDX-License-Identifier: GPL-2.0
/* A reader that does nothing but recv(): the ground truth of the application side's time. It
 * accepts one TCP connection on ADDR:PORT, receives until EOF, and prints
 *   bytes=N oncpu_ns=N utime_ticks=N
 * where oncpu_ns is this thread's on-CPU time by the scheduler (/proc/thread-self/schedstat,
 * exact in ns) and utime_ticks its user time (tick-sampled, and tiny for this loop). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char buf[1 << 17];

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	unsigned long long bytes = 0, oncpu = 0, utime = 0;
	int one = 1, l, c;
	ssize_t n;
	char stat[1024], *p;
	FILE *f;

	if (argc != 3)
		return 2;
	a.sin_port = htons(atoi(argv[2]));
	inet_pton(AF_INET, argv[1], &a.sin_addr);
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
		return perror("bind/listen"), 1;
	printf("listening\n");
	fflush(stdout);
	c = accept(l, NULL, NULL);
	if (c < 0)
		return perror("accept"), 1;
	while ((n = recv(c, buf, sizeof(buf), 0)) > 0)
		bytes += n;
	f = fopen("/proc/thread-self/schedstat", "r");
	if (!f || fscanf(f, "%llu", &oncpu) != 1)
		return 1;
	fclose(f);
	f = fopen("/proc/thread-self/stat", "r");
	if (!f || !fgets(stat, sizeof(stat), f))
		return 1;
	fclose(f);
	p = strrchr(stat, ')');		/* utime is field 14, the 12th after the comm */
	for (int i = 0; p && i < 12; i++)
		p = strchr(p + 1, ' ');
	if (p)
		utime = strtoull(p + 1, NULL, 10);
	printf("bytes=%llu oncpu_ns=%llu utime_ticks=%llu\n", bytes, oncpu, utime);
	return 0;
}
