// Package httprule: temporary stand-in until the real package lands.
package httprule

import (
	"errors"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/policies"
)

type Set struct{ hosts []policies.HTTPHost }

func Compile(hosts []policies.HTTPHost) (*Set, error) { return &Set{hosts: hosts}, nil }

func (s *Set) For(host string) *Host {
	for _, h := range s.hosts {
		if h.Host == host {
			return &Host{h: h}
		}
	}
	return nil
}

func (s *Set) Has(host string) bool { return s.For(host) != nil }

type Host struct{ h policies.HTTPHost }

type RefUpdate struct{ Old, New, Ref string }

type Request struct {
	Method, Path string
	Push         []RefUpdate
	IsPush       bool
}

type Decision struct {
	Action string
	Rule   string
	Index  int
}

func (h *Host) Decide(r Request) Decision {
	if h == nil {
		return Decision{Action: policies.HTTPAllow}
	}
	for i, ru := range h.h.Rules {
		if len(ru.Methods) > 0 && !contains(ru.Methods, r.Method) {
			continue
		}
		if ru.Path != "" {
			if ok, _ := path.Match(strings.ReplaceAll(ru.Path, "**", "*"), r.Path); !ok {
				continue
			}
		}
		return Decision{Action: ru.Action, Rule: "rule", Index: i}
	}
	return Decision{Action: policies.HTTPAllow, Rule: "default"}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func NormalizePath(raw string) (string, error) {
	if !strings.HasPrefix(raw, "/") {
		return "", errors.New("not absolute")
	}
	return path.Clean(raw), nil
}

func IsReceivePack(method, p string) bool {
	return method == "POST" && strings.HasSuffix(p, "/git-receive-pack")
}

func ReadPush(body io.Reader, enc string, max int) ([]RefUpdate, []byte, error) {
	return nil, nil, nil
}
