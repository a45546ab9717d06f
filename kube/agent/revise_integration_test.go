package agent_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestSessionRevisedLive: a change of a running Session's spec.policy
// reaches its sandbox without a restart, as airlock update does on the
// node: a credential added to the spec is minted into the running
// sandbox, the policy version goes up and the PolicyApplied condition
// names the generation; a change no running session can take (another
// image) is refused with the reason, and the session runs on unchanged.
func TestSessionRevisedLive(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	c := k.c
	ctx := t.Context()
	n := startNode(t, env, k.kubeconfig, "node-v", 8, "--node-capacity", "2")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); err != nil {
		t.Fatal(err)
	}
	cred := func(name string) policies.Credential {
		return policies.Credential{Name: name, Issuer: "airlock", Audience: "jobs.world.test", Scopes: []string{"jobs.list"}, TTL: policies.Duration(5 * time.Minute)}
	}
	s := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "live"},
		Spec: v1alpha1.SessionSpec{NodeName: "node-v", Policy: policies.Policy{Label: "live", Image: daemontest.AgentImage,
			Command: []string{"sleep", "300"}, Credentials: []policies.Credential{cred("first")}}}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(s)
	condition := func(want metav1.ConditionStatus, reason string, gen int64) {
		t.Helper()
		kubetest.Eventually(t, 60*time.Second, fmt.Sprintf("PolicyApplied %s %s for generation %d", want, reason, gen), func() (bool, string) {
			if err := c.Get(ctx, key, s); err != nil {
				return false, err.Error()
			}
			cnd := meta.FindStatusCondition(s.Status.Conditions, agent.ConditionPolicy)
			return s.Status.State == v1alpha1.SessionRunning && cnd != nil && cnd.Status == want && cnd.Reason == reason && cnd.ObservedGeneration == gen,
				fmt.Sprintf("state %s, condition %+v", s.Status.State, cnd)
		})
	}
	condition(metav1.ConditionTrue, agent.ReasonAdmitted, s.Generation)
	id := s.Status.ID
	inSandbox := func(args ...string) (string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := n.API.Exec(ctx, id, api.ExecRequest{Command: args}, nil, &out, &errb)
		if err != nil {
			t.Fatalf("exec %v: %v", args, err)
		}
		return out.String() + errb.String(), code
	}
	if out, code := inSandbox("cat", "/run/airlock/credentials/second"); code == 0 {
		t.Fatalf("a credential the Session does not name is in its sandbox: %q", out)
	}

	// Revised: the second credential is minted into the running sandbox.
	s.Spec.Policy.Credentials = append(s.Spec.Policy.Credentials, cred("second"))
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	condition(metav1.ConditionTrue, agent.ReasonRevised, s.Generation)
	if s.Status.PolicyVersion != 2 || s.Status.ID != id {
		t.Errorf("revised: policy version %d, local session %s; want version 2 of %s", s.Status.PolicyVersion, s.Status.ID, id)
	}
	if out, code := inSandbox("cat", "/run/airlock/credentials/second"); code != 0 || strings.Count(strings.TrimSpace(out), ".") != 2 {
		t.Errorf("the added credential in the running sandbox: exit %d, %q; want a token", code, out)
	}

	// Refused: another image. Nothing changes; the session runs on.
	s.Spec.Policy.Image = "docker.io/library/busybox:latest"
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	condition(metav1.ConditionFalse, agent.ReasonRevisionRefused, s.Generation)
	cnd := meta.FindStatusCondition(s.Status.Conditions, agent.ConditionPolicy)
	if !strings.Contains(cnd.Message, "image") || !strings.Contains(cnd.Message, "runs on under policy version 2") || s.Status.PolicyVersion != 2 {
		t.Errorf("refused revision: %q, policy version %d; want the image named and version 2 kept", cnd.Message, s.Status.PolicyVersion)
	}
	if out, code := inSandbox("cat", "/run/airlock/credentials/first"); code != 0 {
		t.Errorf("after the refused revision the session's first credential: exit %d, %q", code, out)
	}
	if err := c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 60*time.Second, "the Session gone", func() (bool, string) {
		err := c.Get(ctx, key, s)
		return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
	})
}
