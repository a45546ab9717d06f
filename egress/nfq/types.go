package nfq

// A Verdict is what becomes of a held packet.
type Verdict uint32

// Verdicts (the kernel's NF_DROP, NF_ACCEPT, NF_REPEAT).
const (
	// Drop drops the packet.
	Drop Verdict = 0
	// Accept lets the packet go on from the rule that queued it.
	Accept Verdict = 1
	// Repeat sends the packet through its hook's rules again from the
	// start, with the verdict's mark (Queue.SetVerdict).
	Repeat Verdict = 4
)

// A Packet is one held packet: its id for the verdict, the mark it
// carries, and its bytes from the network header on (the whole packet,
// up to the queue's copy range).
type Packet struct {
	ID      uint32
	Mark    uint32
	Payload []byte
}
