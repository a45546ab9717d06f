package fsscope

import (
	"fmt"
	"path/filepath"
	"strconv"
)

func (s *Session) path(elem ...string) string {
	return filepath.Join(append([]string{s.dir}, elem...)...)
}

// wsUpper is the quota filesystem's directory for workspace i; it holds
// "upper" and "work".
func (s *Session) wsUpper(i int) string { return s.path(upperDir, "ws"+strconv.Itoa(i)) }
func (s *Session) wsMnt(i int) string   { return s.path(mntDir, "ws"+strconv.Itoa(i)) }
func (s *Session) mountMnt(i int) string {
	return s.path(mntDir, "m"+strconv.Itoa(i))
}
func (s *Session) baselineFile(i int) string { return s.path(fmt.Sprintf(baselineFn, i)) }
func (s *Session) journalFile(i int) string  { return s.path(fmt.Sprintf(journalFn, i)) }

func (s *Session) saveLocked() error {
	return writeJSONAtomic(s.path(stateFile), &s.st)
}
