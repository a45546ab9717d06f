package repair

import (
	"encoding/json"
	"net/netip"

	"github.com/airlock-sandbox/airlock/api"
)

// FromEvent returns the action an audit event refused, or false when the
// event is not a refusal a policy decides: a DNS refusal (layer dns,
// action refused, rcode REFUSED; an empty answer to a record type the
// proxy does not forward is not one), a dropped connection (net,
// dropped), a request an http rule denied (l7, denied, with its rule), a
// write a commit rejected (fs, rejected) or a read of a deny_read mask
// (fs, read_denied). It reads the fields as the layers write them, and as
// they come back from the audit log as JSON.
func FromEvent(ev api.AuditEvent) (Action, bool) {
	str := func(k string) string { s, _ := ev.Fields[k].(string); return s }
	switch {
	case ev.Layer == "dns" && ev.Action == "refused" && str("rcode") == "REFUSED":
		a := Action{Kind: KindName, Name: ev.Subject}
		var dropped []struct {
			Addr netip.Addr `json:"addr"`
		}
		if v, ok := ev.Fields["dropped"]; ok && decode(v, &dropped) {
			for _, d := range dropped {
				a.Dropped = append(a.Dropped, d.Addr)
			}
		}
		return a, true
	case ev.Layer == "net" && ev.Action == "dropped":
		ap, err := netip.ParseAddrPort(ev.Subject)
		if err != nil {
			return Action{}, false
		}
		return Action{Kind: KindAddress, Addr: ap.Addr(), Port: ap.Port()}, true
	case ev.Layer == "l7" && ev.Action == "denied" && str("rule") != "" && str("kind") == "request":
		host := str("host")
		if host == "" {
			host = ev.Subject
		}
		a := Action{Kind: KindHTTP, Name: host, Method: str("method"), Path: str("path")}
		if v, ok := ev.Fields["refs"]; ok {
			decode(v, &a.Refs)
		}
		return a, true
	case ev.Layer == "fs" && ev.Action == "rejected":
		return Action{Kind: KindWrite, Path: ev.Subject, Rule: str("rule")}, true
	case ev.Layer == "fs" && ev.Action == "read_denied":
		return Action{Kind: KindRead, Path: ev.Subject, Rule: str("rule")}, true
	}
	return Action{}, false
}

// decode reads v, a field's value as a layer wrote it or as JSON gave it
// back, into out.
func decode(v any, out any) bool {
	b, err := json.Marshal(v)
	return err == nil && json.Unmarshal(b, out) == nil
}
