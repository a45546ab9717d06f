package runner

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/policies"
)

func TestContrastKeys(t *testing.T) {
	set, err := authgate.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range set.Pairs {
		keys := contrastKeys(p)
		unbound := slices.Contains(keys, unboundKey)
		if want := p.Family == authgate.ExternalSharing; unbound != want {
			t.Errorf("%s: holds the paste site's route: %v, want %v", p.ID, unbound, want)
		}
		for _, tok := range p.World.RegistryTokens {
			if !slices.Contains(keys, "token\x00"+tok.Secret) {
				t.Errorf("%s: no key for token %s", p.ID, tok.Name)
			}
		}
	}
}

// TestScheduler: two tasks that share a key never run at once; a task
// with other keys runs beside them.
func TestScheduler(t *testing.T) {
	a1 := &contrastTask{mode: "a1", keys: []string{unboundKey}}
	a2 := &contrastTask{mode: "a2", keys: []string{unboundKey, "token\x00s"}}
	b := &contrastTask{mode: "b", keys: []string{"token\x00t"}}
	c := &contrastTask{mode: "c"}
	s := newScheduler([]*contrastTask{a1, a2, b, c})

	var mu sync.Mutex
	running := map[string]bool{}
	var order []string
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				task := s.next()
				if task == nil {
					return
				}
				mu.Lock()
				if task.mode[0] == 'a' && (running["a1"] || running["a2"]) {
					t.Errorf("%s runs beside another task holding the paste site's route", task.mode)
				}
				running[task.mode] = true
				order = append(order, task.mode)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				delete(running, task.mode)
				mu.Unlock()
				s.done(task)
			}
		}()
	}
	wg.Wait()
	slices.Sort(order)
	if !slices.Equal(order, []string{"a1", "a2", "b", "c"}) {
		t.Errorf("ran %v", order)
	}
}

func TestSplitFamilies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		families []string
		amp      []string
		runAmp   bool
		contrast []string
	}{
		{"default", nil, nil, true, authgate.Families},
		{"catalog only", []string{"cancel-jobs"}, []string{"cancel-jobs"}, true, nil},
		{"contrast only", []string{authgate.GuardrailBypass, authgate.ScopeEscalation}, nil, false, []string{authgate.GuardrailBypass, authgate.ScopeEscalation}},
		{"both", []string{authgate.ExternalSharing, "restart-services"}, []string{"restart-services"}, true, []string{authgate.ExternalSharing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			amp, runAmp, contrast, set, _, err := splitFamilies(Options{Families: tc.families})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(amp, tc.amp) || runAmp != tc.runAmp || !slices.Equal(contrast, tc.contrast) || set == nil {
				t.Errorf("got %v %v %v; want %v %v %v", amp, runAmp, contrast, tc.amp, tc.runAmp, tc.contrast)
			}
		})
	}
	// Another set without --family runs its families alone.
	dir := t.TempDir()
	if _, _, _, _, _, err := splitFamilies(Options{Instances: dir}); err == nil {
		t.Error("an empty instance directory was accepted")
	}
}

// TestContrastPlan: each selected pair's halves in each contrast mode,
// gate-only's once for both halves (once each with Naive); the keyed runs
// first; a mode without contrast runs refused.
func TestContrastPlan(t *testing.T) {
	set, err := authgate.Default()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := newContrastPlan(set, "shipped", []string{authgate.InferredParameters, authgate.ExternalSharing},
		Options{Prompts: []string{"IP-01", "ES-01"}, Perimeter: stubPerimeter})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range cp.tasks {
		ids = append(ids, task.id())
	}
	want := []string{
		"ES-01/base+inverted/gate-only", "ES-01/base/perimeter", "ES-01/inverted/perimeter",
		"IP-01/base+inverted/gate-only", "IP-01/base/perimeter", "IP-01/inverted/perimeter",
	}
	if !slices.Equal(ids, want) {
		t.Errorf("tasks %v, want %v", ids, want)
	}
	naive, err := newContrastPlan(set, "shipped", []string{authgate.InferredParameters}, Options{Prompts: []string{"IP-01"}, Perimeter: stubPerimeter, Naive: true})
	if err != nil || len(naive.tasks) != 4 {
		t.Errorf("naive plan: %v, %d tasks, want 4", err, len(naive.tasks))
	}
	if _, err := newContrastPlan(set, "shipped", []string{authgate.InferredParameters}, Options{Modes: []string{ModeFSOnly}}); err == nil {
		t.Error("a plan in fs-only alone was accepted")
	}
}

// TestContrastGateOnlyPolicy: gate-only's policy is valid and reaches
// every service of the contrast pairs with the operator's credentials.
func TestContrastGateOnlyPolicy(t *testing.T) {
	p := contrastGateOnly("airlock/bench:test", t.TempDir(), t.TempDir())
	p.Label = "bench-test"
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"tracker.bench.test", "models.bench.test", "packages.bench.test", "paste.share.test", "git.bench.test"} {
		if !slices.Contains(p.Egress.Allow, h) {
			t.Errorf("gate-only does not reach %s: %v", h, p.Egress.Allow)
		}
	}
	for _, aud := range []string{"tracker.bench.test", "models.bench.test", "packages.bench.test"} {
		if !slices.ContainsFunc(p.Credentials, func(c policies.Credential) bool { return c.Audience == aud }) {
			t.Errorf("no operator credential for %s", aud)
		}
	}
	// AmPermBench's lists are unchanged.
	if slices.Contains(WorldHosts(), "paste.share.test") || len(OperatorCredentials()) != 4 {
		t.Errorf("AmPermBench's gate-only changed: %v, %d credentials", WorldHosts(), len(OperatorCredentials()))
	}
}
