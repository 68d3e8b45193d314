// SPDX-License-Identifier: GPL-2.0
/* bench/roundtrip: N one-byte TCP round trips over loopback in one thread, prints the mean ns per
 * round trip. On loopback send() runs the receive path to the peer's socket before it returns, so
 * one thread can play both ends: per round trip two sends, two receives, two skbs up the stack,
 * and no wake-up or context switch, which leaves the per-packet and per-read cost undiluted. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000, i;
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	struct timespec a, b;
	int one = 1, lst, c, s;
	char byte = 'x';

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lst = socket(AF_INET, SOCK_STREAM, 0);
	if (lst < 0 || bind(lst, (struct sockaddr *)&addr, sizeof(addr)) || listen(lst, 1) ||
	    getsockname(lst, (struct sockaddr *)&addr, &len))
		die("listen");
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof(addr)))
		die("connect");
	s = accept(lst, NULL, NULL);
	if (s < 0)
		die("accept");
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++) {
		if (send(c, &byte, 1, 0) != 1 || recv(s, &byte, 1, 0) != 1 ||
		    send(s, &byte, 1, 0) != 1 || recv(c, &byte, 1, 0) != 1)
			die("round trip");
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
