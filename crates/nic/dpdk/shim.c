// SPDX-License-Identifier: MIT OR Apache-2.0
/* A thin C layer over DPDK for the `dpdk` feature of wirespeed-nic.
 *
 * DPDK's data-path calls (rte_eth_rx_burst, rte_pktmbuf_*) are static inline functions in its
 * headers, which Rust cannot call directly; each wrapper here is one call, so the Rust side
 * keeps all the logic. Burst calls take arrays so that one FFI crossing serves many frames. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

int ws_dpdk_eal_init(int argc, char **argv)
{
	int rc = rte_eal_init(argc, argv);

	return rc < 0 ? -rte_errno : rc;
}

int ws_dpdk_eal_cleanup(void)
{
	return rte_eal_cleanup();
}

const char *ws_dpdk_strerror(int err)
{
	return rte_strerror(err);
}

struct rte_mempool *ws_dpdk_pool_create(const char *name, unsigned n, unsigned cache, uint16_t data_room)
{
	return rte_pktmbuf_pool_create(name, n, cache, 0, data_room, (int)rte_socket_id());
}

void ws_dpdk_pool_free(struct rte_mempool *mp)
{
	rte_mempool_free(mp);
}

int ws_dpdk_port_by_name(const char *name, uint16_t *port)
{
	return rte_eth_dev_get_port_by_name(name, port);
}

/* The name of the first usable port whose id is `from` or above, and its id; -ENODEV when
 * there is none. `name` has room for RTE_ETH_NAME_MAX_LEN bytes. */
int ws_dpdk_next_port(uint16_t from, uint16_t *port, char *name)
{
	uint64_t next = rte_eth_find_next_owned_by(from, RTE_ETH_DEV_NO_OWNER);

	if (next >= RTE_MAX_ETHPORTS)
		return -ENODEV;
	*port = (uint16_t)next;
	return rte_eth_dev_get_name_by_port(*port, name);
}

/* Configures `nrxq`/`ntxq` queues with `nb_desc` descriptors each, starts the port and turns
 * promiscuous mode on (best effort: not every vdev has it). */
int ws_dpdk_port_start(uint16_t port, uint16_t nrxq, uint16_t ntxq, uint16_t nb_desc, struct rte_mempool *mp)
{
	struct rte_eth_conf conf;
	int rc;

	memset(&conf, 0, sizeof(conf));
	rc = rte_eth_dev_configure(port, nrxq, ntxq, &conf);
	if (rc < 0)
		return rc;
	for (uint16_t q = 0; q < nrxq; q++) {
		rc = rte_eth_rx_queue_setup(port, q, nb_desc, rte_eth_dev_socket_id(port), NULL, mp);
		if (rc < 0)
			return rc;
	}
	for (uint16_t q = 0; q < ntxq; q++) {
		rc = rte_eth_tx_queue_setup(port, q, nb_desc, rte_eth_dev_socket_id(port), NULL);
		if (rc < 0)
			return rc;
	}
	rc = rte_eth_dev_start(port);
	if (rc < 0)
		return rc;
	(void)rte_eth_promiscuous_enable(port);
	return 0;
}

int ws_dpdk_port_stop(uint16_t port)
{
	int rc = rte_eth_dev_stop(port);

	if (rc < 0)
		return rc;
	return rte_eth_dev_close(port);
}

int ws_dpdk_port_mac(uint16_t port, uint8_t mac[6])
{
	struct rte_ether_addr a;
	int rc = rte_eth_macaddr_get(port, &a);

	if (rc == 0)
		memcpy(mac, a.addr_bytes, 6);
	return rc;
}

uint16_t ws_dpdk_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t ws_dpdk_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

/* Data pointer and length of a single-segment mbuf, for `n` mbufs at once. Multi-segment
 * frames report the first segment only and are flagged with a length of 0 in `seg_ok`. */
void ws_dpdk_mbuf_views(struct rte_mbuf **pkts, uint16_t n, void **data, uint16_t *len, uint8_t *seg_ok)
{
	for (uint16_t i = 0; i < n; i++) {
		data[i] = rte_pktmbuf_mtod(pkts[i], void *);
		len[i] = rte_pktmbuf_data_len(pkts[i]);
		seg_ok[i] = pkts[i]->nb_segs == 1;
	}
}

int ws_dpdk_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **pkts, unsigned n)
{
	return rte_pktmbuf_alloc_bulk(mp, pkts, n);
}

/* Room to write a frame into a fresh mbuf: (data pointer, tailroom). */
void *ws_dpdk_mbuf_room(struct rte_mbuf *m, uint16_t *room)
{
	*room = rte_pktmbuf_tailroom(m);
	return rte_pktmbuf_mtod(m, void *);
}

/* Sets the length of a frame written at the data pointer of a fresh mbuf. */
void ws_dpdk_mbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}

void ws_dpdk_free_bulk(struct rte_mbuf **pkts, unsigned n)
{
	rte_pktmbuf_free_bulk(pkts, n);
}

struct ws_dpdk_stats {
	uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};

int ws_dpdk_port_stats(uint16_t port, struct ws_dpdk_stats *out)
{
	struct rte_eth_stats s;
	int rc = rte_eth_stats_get(port, &s);

	if (rc < 0)
		return rc;
	out->ipackets = s.ipackets;
	out->opackets = s.opackets;
	out->ibytes = s.ibytes;
	out->obytes = s.obytes;
	out->imissed = s.imissed;
	out->ierrors = s.ierrors;
	out->oerrors = s.oerrors;
	out->rx_nombuf = s.rx_nombuf;
	return 0;
}
