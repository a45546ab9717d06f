package nfq

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// Target is the rule expression that queues a packet to queue num:
// xtables' NFQUEUE target (revision 3) through nftables' compatibility
// layer, for kernels built without nftables' own queue expression. It
// fails closed: no bypass, so a packet with no program bound to the
// queue is dropped.
func Target(num uint16) *expr.Target {
	// struct xt_NFQ_info_v3 {__u16 queuenum, queues_total, flags}, in host
	// order, padded to 8 bytes as xtables aligns it.
	info := make([]byte, 8)
	binary.NativeEndian.PutUint16(info, num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	u := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &u}
}
