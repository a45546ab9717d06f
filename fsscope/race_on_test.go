//go:build race

package fsscope

// raceEnabled: under the race detector sync.Pool drops a share of what it
// is given back, by design, so pooled code allocates there.
const raceEnabled = true
