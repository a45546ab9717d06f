package fsscope

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
)

// protect_refs judges ref values, not the files that hold them. A ref of a
// files backend lives in a loose file (refs/...) when there is one, else in
// packed-refs; git pack-refs (run by git gc and git's automatic gc) moves
// refs from one to the other without changing any. So a commit is refused
// when a protected ref's value differs between the host and the session's
// result, loose and packed storage read together: created, deleted, moved,
// made symbolic or given several values in packed-refs. A new or changed
// ref that is symbolic and leads to a protected ref is refused too: git
// would move the protected ref through it (git branch -f, git commit on
// it). What file a ref moved to is not looked at.
//
// A change set that keeps a ref's value only as a whole (the loose file's
// removal and the packed-refs line that replaces it) is committed as a
// whole or not at all: ruleEnv.coupled names, for each such change, the
// change it needs, and blockCoupled blocks it when that one is blocked.

// refValue is a ref's value in one state: absent, a symbolic ref
// ("ref: refs/heads/x"), or an object id (several, space-separated, when
// packed-refs lists it more than once).
type refValue struct {
	ok  bool
	val string
}

func (v refValue) String() string {
	if !v.ok {
		return "absent"
	}
	return v.val
}

// symbolic returns the target of a symbolic ref.
func (v refValue) symbolic() (string, bool) {
	if !v.ok {
		return "", false
	}
	return strings.CutPrefix(v.val, "ref: ")
}

// looseValue reads a loose ref file's content as git does: "ref:" and a
// target, or an object id (what follows the first blank is ignored).
func looseValue(data []byte) refValue {
	s := strings.TrimSpace(string(data))
	if t, ok := strings.CutPrefix(s, "ref:"); ok {
		return refValue{ok: true, val: "ref: " + strings.TrimSpace(t)}
	}
	if f := strings.Fields(s); len(f) > 0 {
		return refValue{ok: true, val: f[0]}
	}
	return refValue{ok: true}
}

// refStore is the ref storage of one git directory that the change set
// touches.
type refStore struct {
	gd string
	// loose maps a ref to the change touching its loose file.
	loose map[string]int
	// packed is the change to packed-refs, or -1.
	packed int
	// Packed refs before and after the change set.
	oldPacked, newPacked map[string]string
}

// refStores groups the changes to loose refs and packed-refs by git
// directory.
func (e *ruleEnv) refStores() ([]*refStore, error) {
	byGD := map[string]*refStore{}
	var order []string
	for i := range e.changes {
		c := &e.changes[i]
		for _, p := range changePaths(c) {
			gd, ok := e.gitDirOf(p)
			if !ok {
				continue
			}
			sub := relTo(p, gd)
			if gd == "" {
				sub = p
			}
			if !strings.HasPrefix(sub, "refs/") && sub != "packed-refs" {
				continue
			}
			st := byGD[gd]
			if st == nil {
				st = &refStore{gd: gd, loose: map[string]int{}, packed: -1}
				byGD[gd] = st
				order = append(order, gd)
			}
			if sub == "packed-refs" {
				st.packed = i
			} else {
				st.loose[sub] = i
			}
		}
	}
	var out []*refStore
	for _, gd := range order {
		st := byGD[gd]
		p := joinRel(st.gd, "packed-refs")
		oldData, err := e.oldRegular(p)
		if err != nil {
			return nil, err
		}
		st.oldPacked = parsePackedRefs(oldData)
		st.newPacked = st.oldPacked
		if st.packed >= 0 {
			newData, _, err := e.newRegular(p, st.packed)
			if err != nil {
				return nil, err
			}
			st.newPacked = parsePackedRefs(newData)
		}
		out = append(out, st)
	}
	return out, nil
}

// oldRegular returns the host's content of rel when it is a regular file,
// nil otherwise.
func (e *ruleEnv) oldRegular(rel string) ([]byte, error) {
	b := e.base.get(rel)
	if b == nil || b.Mode&sIFMT != sIFREG {
		return nil, nil
	}
	return e.readOld(rel)
}

// newRegular returns the content of rel after change i is applied, and
// whether it is then a regular file.
func (e *ruleEnv) newRegular(rel string, i int) ([]byte, bool, error) {
	c := &e.changes[i]
	if c.Kind == KindDeleted || rel != c.Path || c.Type != TypeFile {
		return nil, false, nil
	}
	data, err := e.readNew(rel)
	return data, true, err
}

// looseRef returns the value the loose file of ref gives, before the
// change set (after=false) or after it; ok is false when there is no
// loose file (git then reads packed-refs).
func (st *refStore) looseRef(e *ruleEnv, ref string, after bool) (refValue, bool, error) {
	p := joinRel(st.gd, ref)
	if i, changed := st.loose[ref]; changed && after {
		data, regular, err := e.newRegular(p, i)
		if err != nil || !regular {
			return refValue{}, false, err
		}
		return looseValue(data), true, nil
	}
	b := e.base.get(p)
	if b == nil || b.Mode&sIFMT != sIFREG {
		return refValue{}, false, nil
	}
	data, err := e.readOld(p)
	if err != nil {
		return refValue{}, false, err
	}
	return looseValue(data), true, nil
}

// value returns ref's value with the loose file and packed-refs each as
// before or after the change set.
func (st *refStore) value(e *ruleEnv, ref string, newLoose, newPacked bool) (refValue, error) {
	v, ok, err := st.looseRef(e, ref, newLoose)
	if err != nil || ok {
		return v, err
	}
	packed := st.oldPacked
	if newPacked {
		packed = st.newPacked
	}
	oid, ok := packed[ref]
	return refValue{ok: ok, val: oid}, nil
}

// refValues rejects the changes that alter a protected ref's value or
// point a symbolic ref at one, and records the couplings of every ref.
func (e *ruleEnv) refValues(refs *glob.List, reject func(int, string, string)) error {
	stores, err := e.refStores()
	if err != nil {
		return err
	}
	e.coupled = map[int][]int{}
	for _, st := range stores {
		names := slices.Collect(maps.Keys(st.loose))
		for _, r := range changedPacked(st.oldPacked, st.newPacked) {
			if _, ok := st.loose[r]; !ok {
				names = append(names, r)
			}
		}
		slices.Sort(names)
		for _, ref := range names {
			li, hasLoose := st.loose[ref]
			packedChanged := st.packed >= 0 && st.oldPacked[ref] != st.newPacked[ref]
			before, err := st.value(e, ref, false, false)
			if err != nil {
				return err
			}
			after, err := st.value(e, ref, true, true)
			if err != nil {
				return err
			}
			if pat, ok := protectedRef(refs, ref); ok && before != after {
				reason := fmt.Sprintf("changes ref %s (%s, was %s), protected by %q", ref, after, before, pat)
				if hasLoose {
					reject(li, RuleProtectRefs, e.changes[li].Path+" "+reason)
				}
				if packedChanged {
					reject(st.packed, RuleProtectRefs, e.changes[st.packed].Path+" "+reason)
				}
				continue
			}
			if before == after && hasLoose && st.packed >= 0 {
				// The value holds with both applied; each alone? Any
				// ref: a commit does not lose one by splitting the
				// change set that moved it between files.
				if v, err := st.value(e, ref, true, false); err != nil {
					return err
				} else if v != before {
					e.coupled[li] = append(e.coupled[li], st.packed)
				}
				if v, err := st.value(e, ref, false, true); err != nil {
					return err
				} else if v != before {
					e.coupled[st.packed] = append(e.coupled[st.packed], li)
				}
			}
			if !hasLoose || after == before {
				continue
			}
			// A symbolic ref leading to a protected ref.
			seen := map[string]bool{ref: true}
			for v := after; ; {
				target, ok := v.symbolic()
				if !ok || seen[target] || strings.Contains(target, "..") {
					// git refuses ".." in a ref name.
					break
				}
				seen[target] = true
				if pat, ok := protectedRef(refs, target); ok {
					reject(li, RuleProtectRefs, fmt.Sprintf("%s makes ref %s lead to %s, protected by %q: git would move %s through it", e.changes[li].Path, ref, target, pat, target))
					break
				}
				if v, err = st.value(e, target, true, true); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// changedPacked lists the refs whose packed-refs entry differs.
func changedPacked(a, b map[string]string) []string {
	var out []string
	for name, oid := range a {
		if o, ok := b[name]; !ok || o != oid {
			out = append(out, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// reflogPruned reports whether the new log of a ref keeps only entries of
// the old one, in order: what git reflog expire (run by git gc) does.
// Anything else, an entry added or rewritten, would offer the operator a
// value the ref never had (git reset main@{1}). Trailing blanks do not
// count: an entry written without a message ("... +0000") comes back from
// git reflog expire with an empty one ("... +0000\t").
func reflogPruned(oldData, newData []byte) bool {
	old := bufio.NewScanner(bytes.NewReader(oldData))
	old.Buffer(make([]byte, 0, 4096), 1<<20)
	sc := bufio.NewScanner(bytes.NewReader(newData))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		found := false
		for old.Scan() {
			if strings.TrimRight(old.Text(), " \t\r") == strings.TrimRight(sc.Text(), " \t\r") {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return sc.Err() == nil && old.Err() == nil
}

// blockCoupled returns the changes to block because a change they need
// (coupled) is blocked, to a fixed point.
func blockCoupled(changes []Change, coupled map[int][]int, blocked map[int]string) map[int]string {
	out := map[int]string{}
	isBlocked := func(i int) bool {
		_, a := blocked[i]
		_, b := out[i]
		return a || b
	}
	for more := true; more; {
		more = false
		for _, i := range slices.Sorted(maps.Keys(coupled)) {
			if isBlocked(i) {
				continue
			}
			for _, j := range coupled[i] {
				if isBlocked(j) {
					out[i] = fmt.Sprintf("needs %s, which is not committed: without it the ref this change stores would change", changes[j].Path)
					more = true
					break
				}
			}
		}
	}
	return out
}
