//! The virtio-net feature bits and vhost-user protocol feature bits a
//! port's device offers.

/// Feature bits.
pub mod feature {
    /// VIRTIO_NET_F_MRG_RXBUF.
    pub const MRG_RXBUF: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_MRG_RXBUF;
    /// VIRTIO_RING_F_INDIRECT_DESC (not offered).
    pub const INDIRECT_DESC: u64 = 1 << virtio_bindings::virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;
    /// VIRTIO_RING_F_EVENT_IDX.
    pub const EVENT_IDX: u64 = 1 << virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
    /// VHOST_USER_F_PROTOCOL_FEATURES.
    pub const PROTOCOL_FEATURES: u64 = 1 << 30;
    /// VIRTIO_F_VERSION_1.
    pub const VERSION_1: u64 = 1 << virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
    /// VIRTIO_NET_F_CSUM: the driver may send partially checksummed frames.
    pub const CSUM: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_CSUM;
    /// VIRTIO_NET_F_GUEST_CSUM: the driver takes partially checksummed frames.
    pub const GUEST_CSUM: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_GUEST_CSUM;
    /// VIRTIO_NET_F_GUEST_TSO4: the driver takes TCP/IPv4 GSO frames.
    pub const GUEST_TSO4: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_GUEST_TSO4;
    /// VIRTIO_NET_F_GUEST_TSO6: the driver takes TCP/IPv6 GSO frames.
    pub const GUEST_TSO6: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_GUEST_TSO6;
    /// VIRTIO_NET_F_GUEST_ECN: the driver takes GSO frames with the ECN bit.
    pub const GUEST_ECN: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_GUEST_ECN;
    /// VIRTIO_NET_F_HOST_TSO4: the driver may send TCP/IPv4 GSO frames.
    pub const HOST_TSO4: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_HOST_TSO4;
    /// VIRTIO_NET_F_HOST_TSO6: the driver may send TCP/IPv6 GSO frames.
    pub const HOST_TSO6: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_HOST_TSO6;
    /// VIRTIO_NET_F_HOST_ECN: the driver may send GSO frames with the ECN bit.
    pub const HOST_ECN: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_HOST_ECN;
    /// VIRTIO_F_RING_PACKED: the packed virtqueue layout.
    pub const RING_PACKED: u64 = 1 << virtio_bindings::virtio_config::VIRTIO_F_RING_PACKED;
    /// VIRTIO_F_IN_ORDER: buffers are used in the order they were made available.
    pub const IN_ORDER: u64 = 1 << virtio_bindings::virtio_config::VIRTIO_F_IN_ORDER;
    /// VHOST_F_LOG_ALL: the device logs the guest pages it writes (live migration).
    pub const LOG_ALL: u64 = 1 << 26;
    /// VIRTIO_NET_F_MQ: several queue pairs (offered by multiqueue ports only).
    pub const MQ: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_MQ;
    /// VIRTIO_NET_F_GUEST_ANNOUNCE: the guest announces its own addresses
    /// after a migration (QEMU then sends no SEND_RARP).
    pub const GUEST_ANNOUNCE: u64 = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_GUEST_ANNOUNCE;
    /// Checksum and TCP segmentation offloads, both directions.
    pub const OFFLOADS: u64 =
        CSUM | GUEST_CSUM | GUEST_TSO4 | GUEST_TSO6 | GUEST_ECN | HOST_TSO4 | HOST_TSO6 | HOST_ECN;
    /// What this device offers.
    pub const OFFERED: u64 = MRG_RXBUF
        | EVENT_IDX
        | PROTOCOL_FEATURES
        | VERSION_1
        | RING_PACKED
        | IN_ORDER
        | OFFLOADS
        | LOG_ALL
        | GUEST_ANNOUNCE;
}

/// Protocol feature bits.
pub mod protocol_feature {
    /// VHOST_USER_PROTOCOL_F_MQ: GET_QUEUE_NUM (offered by multiqueue ports only).
    pub const MQ: u64 = 1 << 0;
    /// VHOST_USER_PROTOCOL_F_LOG_SHMFD: the dirty log comes as shared memory.
    pub const LOG_SHMFD: u64 = 1 << 1;
    /// VHOST_USER_PROTOCOL_F_RARP: SEND_RARP announces a migrated guest.
    pub const RARP: u64 = 1 << 2;
    /// VHOST_USER_PROTOCOL_F_REPLY_ACK.
    pub const REPLY_ACK: u64 = 1 << 3;
    /// VHOST_USER_PROTOCOL_F_NET_MTU.
    pub const NET_MTU: u64 = 1 << 4;
    /// What this device offers.
    pub const OFFERED: u64 = LOG_SHMFD | RARP | REPLY_ACK | NET_MTU;
}
