/*
 * The lab's DPDK endpoint pair: one process, one lcore, both virtio-user
 * ports of a switch under test (vhost-user ports A and B).
 *
 * Why it exists: how a vhost-user switch performs depends on the memory its
 * peers hand it. DPDK endpoints cycle through thousands of mbufs from a
 * mempool on hugepages; vnio's own endpoints recycle a few buffers. The
 * shared anchor harness drives the switches with DPDK endpoints, so for the
 * lab's ratios to be comparable with the harness's, the lab must be able to
 * drive them the same way. Written for the lab (crates/lab/src/pair/dpdk.rs
 * builds, starts and reads it); see docs/lab.md.
 *
 * Why one process on one lcore: with two CPUs, two busy-polling endpoint
 * processes on one CPU are time-sliced by the kernel and measure the
 * scheduler, not the switch. One loop sends and receives.
 *
 * usage: pair [EAL options] -- MODE FRAME WARMUP_S DURATION_S ITERATIONS IP_A IP_B
 *   MODE rate: bursts of 32 UDP frames of FRAME bytes into port 0 (A),
 *        counting what port 1 (B) receives.
 *   MODE rtt:  one frame at a time A -> switch -> B, answered by B ->
 *        switch -> A, timed with the TSC.
 * The ports are the vdevs net_virtio_user0 (A) and net_virtio_user1 (B);
 * their MACs come from the vdevs' mac= arguments.
 *
 * Output (stdout; DPDK's own log goes to stderr): one record per line,
 * words separated by spaces, numbers as integers, so the lab can parse
 * them without guessing:
 *   ready
 *   warmup I                         iteration I begins its warm-up
 *   window I MONO_NS                 its measured window begins (CLOCK_MONOTONIC)
 *   second I T OPS MEAN P50 P99 MAX  second T of the window (latency in ns, 0 for rate)
 *   rtt I NS COUNT                   rtt: COUNT round trips of NS ns (ascending)
 *   total I NS SENT RECEIVED BYTES USER_NS SYS_NS
 *                                    window length, frames sent and received
 *                                    (rtt: round trips tried and completed),
 *                                    payload bytes received, lcore CPU time
 *   error TEXT                       and exit status 1
 */
/* RUSAGE_THREAD: the lcore's own CPU time. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

/* As DPDK's own traffic generators and the anchor harness. */
#define BURST 32
#define MBUFS 16384
#define MBUF_CACHE 256
/* Ethernet, IPv4 and UDP headers. */
#define HEADERS 42
/* A round trip's frame carries this after the headers, to be known again. */
#define MAGIC 0x766e696fu /* "vnio" */
/* A leg of a round trip not back within this is lost (and counted). */
#define LEG_TIMEOUT_MS 10
/* How long the ports may take to come up (OVS connects to listening ports
 * on its own schedule). */
#define LINK_WAIT_S 30

struct stamp {
	uint32_t magic;
	uint32_t seq;
};

static volatile sig_atomic_t quit;

static void on_signal(int sig)
{
	(void)sig;
	quit = 1;
}

static void fail(const char *what)
{
	printf("error %s\n", what);
	fflush(stdout);
	exit(1);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling (lcore) thread: what the pair costs, as the lab's
 * own pair accounts its one thread. */
static void thread_cpu(uint64_t *user_ns, uint64_t *sys_ns)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	*user_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000u + (uint64_t)ru.ru_utime.tv_usec * 1000u;
	*sys_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000u + (uint64_t)ru.ru_stime.tv_usec * 1000u;
}

struct pair {
	uint16_t a, b;
	struct rte_mempool *pool;
	unsigned frame;
	/* Headers of a frame from A to B; the payload beyond them is not
	 * written (see send_burst). */
	uint8_t head[HEADERS];
	uint64_t hz;
};

static void build_headers(struct pair *p, uint32_t ip_a, uint32_t ip_b)
{
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)p->head;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);

	memset(p->head, 0, sizeof(p->head));
	if (rte_eth_macaddr_get(p->a, &eth->src_addr) || rte_eth_macaddr_get(p->b, &eth->dst_addr))
		fail("reading the ports' MACs");
	eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->total_length = rte_cpu_to_be_16(p->frame - sizeof(*eth));
	ip->src_addr = ip_a;
	ip->dst_addr = ip_b;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	/* The discard port: nobody is meant to answer the rate's frames. */
	udp->src_port = rte_cpu_to_be_16(9);
	udp->dst_port = rte_cpu_to_be_16(9);
	udp->dgram_len = rte_cpu_to_be_16(p->frame - sizeof(*eth) - sizeof(*ip));
	/* UDP checksum 0: none, which IPv4 allows. */
}

static int port_start(uint16_t port, struct rte_mempool *pool)
{
	struct rte_eth_conf conf;

	memset(&conf, 0, sizeof(conf));
	if (rte_eth_dev_configure(port, 1, 1, &conf) < 0)
		return -1;
	/* 0 descriptors: the driver's default, the vdev's queue_size. */
	if (rte_eth_rx_queue_setup(port, 0, 0, rte_eth_dev_socket_id(port), NULL, pool) < 0)
		return -1;
	if (rte_eth_tx_queue_setup(port, 0, 0, rte_eth_dev_socket_id(port), NULL) < 0)
		return -1;
	return rte_eth_dev_start(port);
}

static int link_up(uint16_t port)
{
	struct rte_eth_link link;

	for (int i = 0; i < LINK_WAIT_S * 10 && !quit; i++) {
		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status)
			return 1;
		rte_delay_ms(100);
	}
	return 0;
}

static void drain(uint16_t port)
{
	struct rte_mbuf *got[BURST];
	uint16_t n;

	while ((n = rte_eth_rx_burst(port, 0, got, BURST)) > 0)
		rte_pktmbuf_free_bulk(got, n);
}

/* One burst into A. Only the headers are written: the switch forwards
 * bytes it does not read, and copying the payload of 1518 B frames would
 * make this loop, not the switch, the bound (DPDK's txonly and the
 * harness's endpoint write headers only too). Frames the ring does not
 * take are freed and not counted as sent, as DPDK's generators do. */
static uint64_t send_burst(struct pair *p)
{
	struct rte_mbuf *tx[BURST];

	if (rte_pktmbuf_alloc_bulk(p->pool, tx, BURST) != 0)
		return 0;
	for (int i = 0; i < BURST; i++) {
		char *d = rte_pktmbuf_append(tx[i], p->frame);
		memcpy(d, p->head, HEADERS);
	}
	uint16_t sent = rte_eth_tx_burst(p->a, 0, tx, BURST);
	if (sent < BURST)
		rte_pktmbuf_free_bulk(&tx[sent], BURST - sent);
	return sent;
}

/* One burst from B, counted and returned to the pool unread. */
static uint64_t receive_burst(struct pair *p)
{
	struct rte_mbuf *rx[BURST];
	uint16_t n = rte_eth_rx_burst(p->b, 0, rx, BURST);

	if (n)
		rte_pktmbuf_free_bulk(rx, n);
	return n;
}

/*
 * The rate. The switch never hears from B while it runs, so a learning
 * switch floods A's frames to its one other port, exactly as with the
 * harness's endpoint and the lab's own pair (which do not announce B
 * either): the three instruments ask the same of the switch.
 */
static void rate_iteration(struct pair *p, int index, double warmup, double duration)
{
	uint64_t tsc = rte_rdtsc();
	uint64_t warm_end = tsc + (uint64_t)(warmup * p->hz);

	printf("warmup %d\n", index);
	fflush(stdout);
	while (rte_rdtsc() < warm_end && !quit) {
		send_burst(p);
		receive_burst(p);
	}
	uint64_t user0, sys0, sent = 0, got = 0, got_before = 0, t = 0;
	uint64_t start = rte_rdtsc();
	uint64_t end = start + (uint64_t)(duration * p->hz);
	uint64_t second_end = start + p->hz;

	thread_cpu(&user0, &sys0);
	printf("window %d %" PRIu64 "\n", index, mono_ns());
	fflush(stdout);
	for (;;) {
		sent += send_burst(p);
		got += receive_burst(p);
		uint64_t now = rte_rdtsc();
		if (now >= second_end) {
			/* Once a second: the print costs microseconds, off a
			 * second of forwarding. */
			printf("second %d %" PRIu64 " %" PRIu64 " 0 0 0 0\n", index, t++,
			       got - got_before);
			fflush(stdout);
			got_before = got;
			second_end += p->hz;
		}
		if (now >= end || quit)
			break;
	}
	uint64_t ns = (rte_rdtsc() - start) * 1000000000u / p->hz;
	uint64_t user1, sys1;

	thread_cpu(&user1, &sys1);
	printf("total %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
	       index, ns, sent, got, got * (p->frame - HEADERS), user1 - user0, sys1 - sys0);
	fflush(stdout);
}

/* The frame stamped `seq`, received on `port` before `deadline` (TSC), or
 * NULL. Anything else arriving (a late answer of an earlier round trip) is
 * freed. */
static struct rte_mbuf *await(uint16_t port, uint32_t seq, uint64_t deadline)
{
	struct rte_mbuf *rx[BURST], *hit = NULL;

	while (!hit && !quit) {
		uint16_t n = rte_eth_rx_burst(port, 0, rx, BURST);

		for (uint16_t i = 0; i < n; i++) {
			const struct stamp *s =
				rte_pktmbuf_mtod_offset(rx[i], const struct stamp *, HEADERS);
			if (!hit && rx[i]->data_len >= HEADERS + sizeof(*s) && s->magic == MAGIC &&
			    s->seq == seq)
				hit = rx[i];
			else
				rte_pktmbuf_free(rx[i]);
		}
		if (!hit && rte_rdtsc() > deadline)
			break;
	}
	return hit;
}

/*
 * B answers as a real responder does: the frame goes back with its MACs
 * (and IP addresses) swapped. Sent back unchanged, it would carry A's MAC
 * into the switch from B's port, and a learning switch would move A to
 * B's port and back again on every round trip: table updates no real
 * traffic causes. Swapping the addresses leaves the IPv4 checksum as it is.
 */
static void answer(struct rte_mbuf *m)
{
	struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_ether_addr mac = eth->src_addr;
	uint32_t addr = ip->src_addr;

	eth->src_addr = eth->dst_addr;
	eth->dst_addr = mac;
	ip->src_addr = ip->dst_addr;
	ip->dst_addr = addr;
}

/* One round trip, in TSC cycles; 0 when a leg was lost. */
static uint64_t round_trip(struct pair *p, uint32_t seq)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(p->pool);

	if (!m)
		return 0;
	char *d = rte_pktmbuf_append(m, p->frame);
	memcpy(d, p->head, HEADERS);
	struct stamp *s = (struct stamp *)(d + HEADERS);
	s->magic = MAGIC;
	s->seq = seq;
	uint64_t leg = p->hz / 1000 * LEG_TIMEOUT_MS;
	uint64_t t0 = rte_rdtsc();
	if (rte_eth_tx_burst(p->a, 0, &m, 1) != 1) {
		rte_pktmbuf_free(m);
		return 0;
	}
	m = await(p->b, seq, t0 + leg);
	if (!m)
		return 0;
	answer(m);
	if (rte_eth_tx_burst(p->b, 0, &m, 1) != 1) {
		rte_pktmbuf_free(m);
		return 0;
	}
	m = await(p->a, seq, rte_rdtsc() + leg);
	uint64_t t1 = rte_rdtsc();
	if (!m)
		return 0;
	rte_pktmbuf_free(m);
	return t1 - t0;
}

static int ascending(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* Second `t` of the window from its samples (ns, sorted here). */
static void print_second(int index, uint64_t t, uint64_t *ns, size_t n)
{
	uint64_t sum = 0;

	if (n == 0) {
		printf("second %d %" PRIu64 " 0 0 0 0 0\n", index, t);
		return;
	}
	qsort(ns, n, sizeof(*ns), ascending);
	for (size_t i = 0; i < n; i++)
		sum += ns[i];
	printf("second %d %" PRIu64 " %zu %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", index,
	       t, n, sum / n, ns[(n - 1) / 2], ns[(size_t)((n - 1) * 0.99)], ns[n - 1]);
}

static void rtt_iteration(struct pair *p, int index, double warmup, double duration,
			  uint64_t **samples, size_t *capacity)
{
	static uint32_t seq;
	uint64_t warm_end = rte_rdtsc() + (uint64_t)(warmup * p->hz);

	printf("warmup %d\n", index);
	fflush(stdout);
	drain(p->a);
	drain(p->b);
	while (rte_rdtsc() < warm_end && !quit)
		round_trip(p, ++seq);

	/* Where each second's samples begin: the window is cut into seconds
	 * afterwards, nothing but the round trips runs inside it. */
	size_t seconds = (size_t)duration + 2, at_second[seconds + 1];
	size_t n = 0, second = 0;
	uint64_t tried = 0, user0, sys0;
	uint64_t start = rte_rdtsc();
	uint64_t end = start + (uint64_t)(duration * p->hz);
	uint64_t second_end = start + p->hz;

	at_second[0] = 0;
	thread_cpu(&user0, &sys0);
	printf("window %d %" PRIu64 "\n", index, mono_ns());
	fflush(stdout);
	for (;;) {
		uint64_t cycles = round_trip(p, ++seq);
		uint64_t now = rte_rdtsc();

		tried++;
		if (cycles) {
			if (n == *capacity) {
				*capacity *= 2;
				*samples = realloc(*samples, *capacity * sizeof(**samples));
				if (!*samples)
					fail("out of memory for round trips");
			}
			(*samples)[n++] = cycles;
		}
		if (now >= second_end && second < seconds) {
			at_second[++second] = n;
			second_end += p->hz;
		}
		if (now >= end || quit)
			break;
	}
	uint64_t ns = (rte_rdtsc() - start) * 1000000000u / p->hz;
	uint64_t user1, sys1;

	thread_cpu(&user1, &sys1);
	uint64_t *s = *samples;
	for (size_t i = 0; i < n; i++)
		s[i] = s[i] * 1000000000u / p->hz;
	/* Whole seconds only, as the lab's own pair reports them. */
	for (size_t t = 0; t < second; t++)
		print_second(index, t, s + at_second[t], at_second[t + 1] - at_second[t]);
	/* Every round trip, as (value, count) runs: exact, and compact enough
	 * for the lab to put into its own histogram. */
	qsort(s, n, sizeof(*s), ascending);
	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && s[j] == s[i])
			j++;
		printf("rtt %d %" PRIu64 " %zu\n", index, s[i], j - i);
		i = j;
	}
	printf("total %d %" PRIu64 " %" PRIu64 " %zu %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", index,
	       ns, tried, n, (uint64_t)n * (p->frame - HEADERS) * 2, user1 - user0, sys1 - sys0);
	fflush(stdout);
}

static uint32_t parse_ip(const char *text)
{
	unsigned a, b, c, d;
	char end;

	if (sscanf(text, "%u.%u.%u.%u%c", &a, &b, &c, &d, &end) != 4 || a > 255 || b > 255 ||
	    c > 255 || d > 255)
		fail("bad IPv4 address");
	return rte_cpu_to_be_32(RTE_IPV4(a, b, c, d));
}

int main(int argc, char **argv)
{
	struct pair p;

	/* stdout carries the records only: DPDK's log goes to stderr. */
	rte_openlog_stream(stderr);
	int eal = rte_eal_init(argc, argv);
	if (eal < 0)
		fail("EAL initialisation failed (see the log)");
	argc -= eal;
	argv += eal;
	if (argc != 8)
		fail("usage: pair [EAL] -- rate|rtt FRAME WARMUP_S DURATION_S ITERATIONS IP_A IP_B");
	const char *mode = argv[1];
	int rtt = strcmp(mode, "rtt") == 0;
	if (!rtt && strcmp(mode, "rate") != 0)
		fail("the mode is rate or rtt");
	p.frame = (unsigned)atoi(argv[2]);
	double warmup = atof(argv[3]), duration = atof(argv[4]);
	int iterations = atoi(argv[5]);
	uint32_t ip_a = parse_ip(argv[6]), ip_b = parse_ip(argv[7]);
	if (p.frame < HEADERS + sizeof(struct stamp) || p.frame > 1518)
		fail("the frame is 50 to 1518 bytes");
	if (duration <= 0 || warmup < 0 || iterations < 1)
		fail("bad duration, warm-up or iterations");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	p.hz = rte_get_tsc_hz();

	if (rte_eth_dev_get_port_by_name("net_virtio_user0", &p.a) ||
	    rte_eth_dev_get_port_by_name("net_virtio_user1", &p.b))
		fail("needs the vdevs net_virtio_user0 and net_virtio_user1");
	p.pool = rte_pktmbuf_pool_create("pair", MBUFS, MBUF_CACHE, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
					 rte_socket_id());
	if (!p.pool)
		fail("creating the mbuf pool (hugepages short?)");
	if (port_start(p.a, p.pool) || port_start(p.b, p.pool))
		fail("starting the ports");
	if (!link_up(p.a) || !link_up(p.b))
		fail("the switch did not bring both ports up");
	build_headers(&p, ip_a, ip_b);
	printf("ready\n");
	fflush(stdout);
	drain(p.a);
	drain(p.b);

	/* Room for a round trip per microsecond of the window, allocated
	 * before it: growing the array inside the window would stall one
	 * round trip on copying. Bounded (128 MiB); a faster or longer window
	 * grows it, rarely. */
	size_t capacity = (size_t)(duration * 1e6) + 1024;
	if (capacity > (size_t)1 << 24)
		capacity = (size_t)1 << 24;
	uint64_t *samples = rtt ? malloc(capacity * sizeof(*samples)) : NULL;
	if (rtt && !samples)
		fail("out of memory for round trips");
	for (int i = 0; i < iterations && !quit; i++) {
		if (rtt)
			rtt_iteration(&p, i, warmup, duration, &samples, &capacity);
		else
			rate_iteration(&p, i, warmup, duration);
	}
	free(samples);
	rte_eth_dev_stop(p.a);
	rte_eth_dev_stop(p.b);
	rte_eth_dev_close(p.a);
	rte_eth_dev_close(p.b);
	rte_eal_cleanup();
	return 0;
}
