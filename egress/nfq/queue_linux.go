package nfq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nfnetlink_queue's message types, commands and attributes.
const (
	subsysQueue = 3 // NFNL_SUBSYS_QUEUE

	msgPacket  = 0 // NFQNL_MSG_PACKET
	msgVerdict = 1 // NFQNL_MSG_VERDICT
	msgConfig  = 2 // NFQNL_MSG_CONFIG

	cfgCmdBind = 1 // NFQNL_CFG_CMD_BIND

	attrCfgCmd    = 1 // NFQA_CFG_CMD
	attrCfgParams = 2 // NFQA_CFG_PARAMS
	attrCfgMaxLen = 3 // NFQA_CFG_QUEUE_MAXLEN

	attrPacketHdr  = 1  // NFQA_PACKET_HDR
	attrVerdictHdr = 2  // NFQA_VERDICT_HDR
	attrMark       = 3  // NFQA_MARK
	attrPayload    = 10 // NFQA_PAYLOAD

	copyPacket = 2 // NFQNL_COPY_PACKET
)

// Queue is a bound netfilter queue.
type Queue struct {
	conn *netlink.Conn
	num  uint16
}

// Config is how Open binds a queue.
type Config struct {
	// NetNS is a file descriptor of the network namespace whose queue is
	// bound; 0 is the calling thread's.
	NetNS int
	// MaxLen is how many packets the kernel holds for the queue before
	// it drops new ones (the kernel's default, 1024, when zero).
	MaxLen uint32
	// CopyRange is how many bytes of each packet are copied to user space
	// (65535, a whole packet, when zero).
	CopyRange uint32
}

// Open binds queue num of a network namespace. Only one process may bind
// a queue number in a namespace.
func Open(num uint16, cfg Config) (*Queue, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: cfg.NetNS})
	if err != nil {
		return nil, fmt.Errorf("nfq: netlink: %w", err)
	}
	q := &Queue{conn: conn, num: num}
	// Many packets may wait while a burst of connections opens; a full
	// socket buffer drops them (TCP sends them again).
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetOption(netlink.NoENOBUFS, true)
	if cfg.CopyRange == 0 {
		cfg.CopyRange = 0xffff
	}
	params := make([]byte, 5) // struct nfqnl_msg_config_params, packed
	binary.BigEndian.PutUint32(params, cfg.CopyRange)
	params[4] = copyPacket
	// No NFQA_CFG_F_GSO (nor any other flag): a reader must check the
	// bytes its packets go on with. Without the flag the kernel segments
	// a GSO packet before queueing it, and data sent with sendfile(2)
	// then rewritten in the file is seen as the copy it is (egress's
	// TestFastAttackSendfileRewrite); with it, unsegmented packets whose
	// data are a file's pages would be queued, and those pages may change
	// between the check and the packet's way on.
	attrs := []netlink.Attribute{
		{Type: attrCfgCmd, Data: []byte{cfgCmdBind, 0, 0, 0}},
		{Type: attrCfgParams, Data: params},
	}
	if cfg.MaxLen > 0 {
		attrs = append(attrs, netlink.Attribute{Type: attrCfgMaxLen, Data: binary.BigEndian.AppendUint32(nil, cfg.MaxLen)})
	}
	if err := q.config(attrs); err != nil {
		conn.Close()
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("nfq: queue %d is bound by another program: %w", num, err)
		}
		return nil, fmt.Errorf("nfq: bind queue %d: %w", num, err)
	}
	return q, nil
}

// config sends a configuration message and waits for the kernel's ack.
func (q *Queue) config(attrs []netlink.Attribute) error {
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	_, err = q.conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysQueue<<8 | msgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(q.genHeader(), data...),
	})
	return err
}

// genHeader is struct nfgenmsg: family unspecified, version 0, the queue
// number in network order.
func (q *Queue) genHeader() []byte {
	return []byte{unix.AF_UNSPEC, 0, byte(q.num >> 8), byte(q.num)}
}

// Receive waits for held packets and returns them, in the order the
// kernel queued them. Each needs a verdict (SetVerdict); one never given
// holds its packet until the queue is closed, which drops it. The
// kernel's answers to verdicts on packets it no longer holds are read
// past.
func (q *Queue) Receive() ([]Packet, error) {
	msgs, err := q.conn.Receive()
	for errors.Is(err, unix.ENOENT) {
		// The kernel's answer to a verdict on a packet it no longer
		// holds (it drops the packets queued from or to an interface
		// that goes away): not the queue's failure, which its reader
		// would wait out, every other packet waiting.
		msgs, err = q.conn.Receive()
	}
	if err != nil {
		return nil, err
	}
	out := make([]Packet, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(subsysQueue<<8|msgPacket) || len(m.Data) < 4 {
			continue
		}
		p, err := parsePacket(m.Data[4:])
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePacket(b []byte) (Packet, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Packet{}, fmt.Errorf("nfq: packet attributes: %w", err)
	}
	ad.ByteOrder = binary.BigEndian
	var p Packet
	var hdr bool
	for ad.Next() {
		switch ad.Type() {
		case attrPacketHdr:
			d := ad.Bytes()
			if len(d) < 4 {
				return Packet{}, errors.New("nfq: short packet header")
			}
			p.ID, hdr = binary.BigEndian.Uint32(d), true
		case attrMark:
			p.Mark = ad.Uint32()
		case attrPayload:
			p.Payload = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return Packet{}, fmt.Errorf("nfq: packet attributes: %w", err)
	}
	if !hdr {
		return Packet{}, errors.New("nfq: packet without a header")
	}
	return p, nil
}

// SetVerdict decides held packet id. With Repeat, mark becomes the
// packet's mark for its second pass through the rules; otherwise a
// non-nil mark is set on the packet as it goes on.
func (q *Queue) SetVerdict(id uint32, v Verdict, mark *uint32) error {
	vh := make([]byte, 8) // struct nfqnl_msg_verdict_hdr
	binary.BigEndian.PutUint32(vh, uint32(v))
	binary.BigEndian.PutUint32(vh[4:], id)
	attrs := []netlink.Attribute{{Type: attrVerdictHdr, Data: vh}}
	if mark != nil {
		attrs = append(attrs, netlink.Attribute{Type: attrMark, Data: binary.BigEndian.AppendUint32(nil, *mark)})
	}
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	_, err = q.conn.Send(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysQueue<<8 | msgVerdict), Flags: netlink.Request},
		Data:   append(q.genHeader(), data...),
	})
	return err
}

// Close closes the queue's socket, which unbinds it (the kernel drops
// the packets it still holds); a Receive waiting returns an error. An
// explicit unbind would wait for that Receive.
func (q *Queue) Close() error {
	err := q.conn.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
