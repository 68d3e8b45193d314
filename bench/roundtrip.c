// SPDX-License-Identifier: GPL-2.0
/* bench/roundtrip: N one-byte round trips over loopback, TCP or UDP, in one thread; prints the
 * mean ns per round trip. On loopback send() runs the receive path to the peer's socket before it
 * returns (the backlog's softirq, at the end of the send), so one thread can play both ends: per
 * round trip two sends, two receives, two skbs up the stack, and no wake-up or context switch,
 * which leaves the per-packet and per-read cost undiluted.
 *
 *     roundtrip N [tcp|udp]
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* a socket of TYPE bound to a loopback port of the kernel's choosing, its address in ADDR */
static int bound(int type, struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(AF_INET, type, 0);

	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) ||
	    getsockname(fd, (struct sockaddr *)addr, &len))
		die("bind");
	return fd;
}

/* a connected TCP pair, without Nagle's delay: *C the client's end, *S the server's */
static void tcp_pair(int *c, int *s)
{
	struct sockaddr_in addr;
	int one = 1, lst = bound(SOCK_STREAM, &addr);

	if (listen(lst, 1))
		die("listen");
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (*c < 0 || connect(*c, (struct sockaddr *)&addr, sizeof(addr)))
		die("connect");
	*s = accept(lst, NULL, NULL);
	if (*s < 0)
		die("accept");
	setsockopt(*c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* two UDP sockets connected to each other: each end a flow of its own 4-tuple, as a DNS or QUIC
 * peer's is */
static void udp_pair(int *c, int *s)
{
	struct sockaddr_in a, b;

	*c = bound(SOCK_DGRAM, &a);
	*s = bound(SOCK_DGRAM, &b);
	if (connect(*c, (struct sockaddr *)&b, sizeof(b)) ||
	    connect(*s, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000, i;
	int udp = argc > 2 && !strcmp(argv[2], "udp"), c, s;
	struct timespec a, b;
	char byte = 'x';

	if (udp)
		udp_pair(&c, &s);
	else
		tcp_pair(&c, &s);
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
