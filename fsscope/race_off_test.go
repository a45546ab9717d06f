//go:build !race

package fsscope

const raceEnabled = false
