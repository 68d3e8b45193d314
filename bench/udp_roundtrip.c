// SPDX-License-Identifier: GPL-2.0
/* bench/roundtrip --proto udp: N one-byte UDP round trips over loopback in one thread, prints the
 * mean ns per round trip. As tcp_roundtrip.c: on loopback send() runs the receive path to the
 * peer's socket before it returns (the backlog's softirq, at the end of the send), so one thread
 * plays both ends: per round trip two datagrams up the stack, two reads, no wake-up. */
#include <netinet/in.h>
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

/* a UDP socket bound to a loopback port of the kernel's choosing, its address in ADDR */
static int bound(struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr->sin_port = 0;
	if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) ||
	    getsockname(fd, (struct sockaddr *)addr, &len))
		die("bind");
	return fd;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000, i;
	struct sockaddr_in a_addr, b_addr;
	struct timespec a, b;
	char byte = 'x';
	int c = bound(&a_addr), s = bound(&b_addr);

	/* connected both ways: each end is a flow of its own 4-tuple, as a DNS or QUIC peer's is */
	if (connect(c, (struct sockaddr *)&b_addr, sizeof(b_addr)) ||
	    connect(s, (struct sockaddr *)&a_addr, sizeof(a_addr)))
		die("connect");
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
