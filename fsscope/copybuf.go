package fsscope

import (
	"io"
	"sync"
)

// copyBufSize is the size of the pooled buffers files are read through.
const copyBufSize = 32 << 10

// copyBufs holds the buffers that copies, hashes and sniffs of workspace
// files read through. io.Copy from an *os.File into a hash, or into a file
// on another filesystem (copy_file_range does not cross them), allocates a
// fresh 32 KiB buffer per call, so a commit of 10,000 files otherwise
// allocates 10,000 of them per pass.
var copyBufs = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// onlyWriter and onlyReader hide the ReaderFrom and WriterTo of what they
// wrap, so that io.CopyBuffer uses the buffer it is given.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }

// copyPooled copies src to dst through a pooled buffer.
func copyPooled(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, buf[:])
}
