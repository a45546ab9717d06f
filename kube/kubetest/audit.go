package kubetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// auditPolicy records every request once, when its response completed,
// at Metadata level: no bodies, so the log stays small and holds no
// secret. A long-running request (a watch) is also recorded when it
// starts (stage ResponseStarted).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// AuditEvent is the part of an apiserver audit event (audit.k8s.io/v1
// Event) a test counts by.
type AuditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Resource is the event's resource and subresource as "resource" or
// "resource/subresource"; "" for a non-resource URL (/healthz, /api).
func (e AuditEvent) Resource() string {
	if e.ObjectRef == nil {
		return ""
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// IsWrite reports whether the event's verb changes state.
func (e AuditEvent) IsWrite() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// AuditEvents reads the audit log: every request completed so far (stage
// ResponseComplete) and every watch started (stage ResponseStarted; a
// watch counts once, when it starts), in order.
func (cp *ControlPlane) AuditEvents() ([]AuditEvent, error) {
	f, err := os.Open(cp.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", cp.AuditLog, line, err)
		}
		if (e.Verb == "watch") == (e.Stage == "ResponseStarted") {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return out, nil
}
