package sqlite

import (
	"fmt"
	"sync"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/sqlite/lib"
)

// The direct writer's WAL file goes through the VFS "hookd-wal": SQLite's
// unix VFS, except that a WAL file's writes are gathered in memory and
// reach the file in one write per commit. SQLite writes each WAL frame as
// two pwrites (its 24-byte header, then the page), so a result batch of
// 40 pages made 80 syscalls; a profile of the lifecycle bench had them as
// the largest single cost of the writer after the fsync (docs/bench.md).
//
// Nothing waits longer for it: the gathered bytes are written before the
// commit frame's write returns (so a failed write fails that commit, before
// SQLite publishes it to readers through the WAL index), and before any
// other call that reads, sizes, syncs or truncates the file. The database
// file and every other file pass straight to the unix VFS.
//
// It needs its connection to run with cache_spill off (openDirect): then
// SQLite writes a transaction's frames only as it commits, all in one go,
// the commit frame last, so nothing is left gathered once a transaction
// ends. A spill wrote frames early, which a rollback left gathered, to be
// written later over what the other writer had committed; and a page
// rewritten after a spill had SQLite rewrite the commit frame's header
// after the commit frame, which stayed gathered.
// TestWALVFSRolledBackTransactionWritesNothingLater and
// TestWALVFSRewrittenPagesCommitWhole fail with spills on.

const (
	walVFSName = "hookd-wal"
	walBufSize = 1 << 20
	// walMaxWrite is the most handed to the unix VFS's xWrite at once: it
	// masks a write's length to 17 bits, so one of 128 KiB writes nothing
	// and answers SQLITE_FULL.
	walMaxWrite = 0x1f000
	// walFrameHeader is the length of a WAL frame's header: no other write
	// to a WAL file has it (the file's header is 32 bytes, a page ≥ 512).
	walFrameHeader = 24
)

// walFile is what the VFS keeps of a WAL file, in C memory after the unix
// VFS's own file struct: Go memory is not SQLite's to hold.
type walFile struct {
	orig   uintptr // the unix VFS's io methods for this file
	buf    uintptr // walBufSize bytes of C memory
	off    int64   // the file offset of buf[0]
	n      int64   // bytes gathered in buf
	commit int32   // the last frame header written was a commit frame's: writes go through until the next header
}

var walVFS struct {
	once    sync.Once
	err     error
	unix    uintptr // the unix VFS
	unixSz  int64   // its szOsFile: where a walFile starts in a file struct
	mu      sync.Mutex
	methods map[uintptr]uintptr // the unix io methods → their copy with our WAL methods
}

// registerWALVFS registers the VFS once per process.
func registerWALVFS() error {
	walVFS.once.Do(func() { walVFS.err = doRegisterWALVFS() })
	return walVFS.err
}

func doRegisterWALVFS() error {
	tls := libc.NewTLS()
	defer tls.Close()
	unix := lib.Xsqlite3_vfs_find(tls, 0)
	if unix == 0 {
		return fmt.Errorf("sqlite: no default VFS to wrap")
	}
	name, err := libc.CString(walVFSName)
	if err != nil {
		return err
	}
	v := lib.Xsqlite3_malloc(tls, int32(unsafe.Sizeof(lib.Tsqlite3_vfs{})))
	if v == 0 {
		return fmt.Errorf("sqlite: no memory for the WAL VFS")
	}
	vfs := (*lib.Tsqlite3_vfs)(at(v))
	*vfs = *(*lib.Tsqlite3_vfs)(at(unix))
	walVFS.unix = unix
	walVFS.unixSz = (int64(vfs.FszOsFile) + 7) &^ 7
	walVFS.methods = map[uintptr]uintptr{}
	vfs.FszOsFile = int32(walVFS.unixSz) + int32(unsafe.Sizeof(walFile{}))
	vfs.FzName = name
	vfs.FpNext = 0
	vfs.FxOpen = cFunc(walOpen)
	if rc := lib.Xsqlite3_vfs_register(tls, v, 0); rc != lib.SQLITE_OK {
		return fmt.Errorf("sqlite: register the WAL VFS: code %d", rc)
	}
	return nil
}

// walOpen opens any file through the unix VFS, then has a WAL file's
// methods go through ours.
func walOpen(tls *libc.TLS, _ uintptr, zName uintptr, f uintptr, flags int32, pOutFlags uintptr) int32 {
	unix := (*lib.Tsqlite3_vfs)(at(walVFS.unix))
	rc := cCall[func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32](unix.FxOpen)(tls, walVFS.unix, zName, f, flags, pOutFlags)
	if rc != lib.SQLITE_OK || flags&lib.SQLITE_OPEN_WAL == 0 {
		return rc
	}
	orig := (*lib.Tsqlite3_file)(at(f)).FpMethods
	if orig == 0 {
		return rc
	}
	buf := lib.Xsqlite3_malloc(tls, walBufSize)
	if buf == 0 {
		return rc // unbuffered: the unix VFS's own methods
	}
	m := wrappedMethods(tls, orig)
	if m == orig {
		lib.Xsqlite3_free(tls, buf)
		return rc
	}
	*file(f) = walFile{orig: orig, buf: buf}
	(*lib.Tsqlite3_file)(at(f)).FpMethods = m
	return rc
}

// wrappedMethods is orig's copy with the WAL methods, made once per orig.
func wrappedMethods(tls *libc.TLS, orig uintptr) uintptr {
	walVFS.mu.Lock()
	defer walVFS.mu.Unlock()
	if m, ok := walVFS.methods[orig]; ok {
		return m
	}
	m := lib.Xsqlite3_malloc(tls, int32(unsafe.Sizeof(lib.Tsqlite3_io_methods{})))
	if m == 0 {
		return orig // unbuffered: the unix VFS's own methods
	}
	io := (*lib.Tsqlite3_io_methods)(at(m))
	*io = *(*lib.Tsqlite3_io_methods)(at(orig))
	io.FxClose = cFunc(walClose)
	io.FxRead = cFunc(walRead)
	io.FxWrite = cFunc(walWrite)
	io.FxTruncate = cFunc(walTruncate)
	io.FxSync = cFunc(walSync)
	io.FxFileSize = cFunc(walFileSize)
	io.FxFileControl = cFunc(walFileControl)
	walVFS.methods[orig] = m
	return m
}

func walWrite(tls *libc.TLS, f, z uintptr, n int32, off int64) int32 {
	w := file(f)
	commit := w.commit != 0
	if w.n > 0 && (off != w.off+w.n || w.n+int64(n) > walBufSize) {
		if rc := flushWAL(tls, f, w); rc != lib.SQLITE_OK {
			return rc
		}
	}
	if int64(n) > walBufSize {
		return writePieces(tls, f, w, z, int64(n), off)
	}
	if w.n == 0 {
		w.off = off
	}
	src := unsafe.Slice((*byte)(at(z)), n)
	copy(unsafe.Slice((*byte)(at(w.buf+uintptr(w.n))), n), src)
	w.n += int64(n)
	if n == walFrameHeader {
		// A frame header's bytes 4–7 are the database's size after a commit
		// frame, 0 on any other. Every write after a commit frame's header
		// goes through until the next other frame's header: its page, and
		// what SQLite may write after it, e.g. padding frames to a sector
		// boundary split at the sync (psow=0), which it publishes with the
		// commit.
		w.commit = 0
		if (src[4] | src[5] | src[6] | src[7]) != 0 {
			w.commit = 1
		}
		return lib.SQLITE_OK
	}
	if commit {
		return flushWAL(tls, f, w)
	}
	return lib.SQLITE_OK
}

// flushWAL writes what w gathered; on failure it is dropped, as SQLite
// rewrites a failed commit's frames from its own pages.
func flushWAL(tls *libc.TLS, f uintptr, w *walFile) int32 {
	n := w.n
	w.n = 0
	return writePieces(tls, f, w, w.buf, n, w.off)
}

// writePieces writes n bytes at z to the file at off, in pieces the unix
// VFS writes whole.
func writePieces(tls *libc.TLS, f uintptr, w *walFile, z uintptr, n, off int64) int32 {
	write := cCall[rwFunc](origMethods(w).FxWrite)
	for done := int64(0); done < n; {
		piece := min(n-done, walMaxWrite)
		if rc := write(tls, f, z+uintptr(done), int32(piece), off+done); rc != lib.SQLITE_OK {
			return rc
		}
		done += piece
	}
	return lib.SQLITE_OK
}

func walRead(tls *libc.TLS, f, z uintptr, n int32, off int64) int32 {
	w := file(f)
	if rc := flushWAL(tls, f, w); rc != lib.SQLITE_OK {
		return rc
	}
	return cCall[rwFunc](origMethods(w).FxRead)(tls, f, z, n, off)
}

func walTruncate(tls *libc.TLS, f uintptr, size int64) int32 {
	w := file(f)
	if rc := flushWAL(tls, f, w); rc != lib.SQLITE_OK {
		return rc
	}
	return cCall[func(*libc.TLS, uintptr, int64) int32](origMethods(w).FxTruncate)(tls, f, size)
}

func walSync(tls *libc.TLS, f uintptr, flags int32) int32 {
	w := file(f)
	if rc := flushWAL(tls, f, w); rc != lib.SQLITE_OK {
		return rc
	}
	return cCall[func(*libc.TLS, uintptr, int32) int32](origMethods(w).FxSync)(tls, f, flags)
}

func walFileSize(tls *libc.TLS, f, pSize uintptr) int32 {
	w := file(f)
	if rc := flushWAL(tls, f, w); rc != lib.SQLITE_OK {
		return rc
	}
	return cCall[func(*libc.TLS, uintptr, uintptr) int32](origMethods(w).FxFileSize)(tls, f, pSize)
}

func walFileControl(tls *libc.TLS, f uintptr, op int32, pArg uintptr) int32 {
	w := file(f)
	if rc := flushWAL(tls, f, w); rc != lib.SQLITE_OK {
		return rc
	}
	return cCall[func(*libc.TLS, uintptr, int32, uintptr) int32](origMethods(w).FxFileControl)(tls, f, op, pArg)
}

// walClose writes what is gathered, then closes the file as the unix VFS
// does; an error writing is the close's.
func walClose(tls *libc.TLS, f uintptr) int32 {
	w := file(f)
	rc := flushWAL(tls, f, w)
	orig := w.orig
	lib.Xsqlite3_free(tls, w.buf)
	*w = walFile{}
	(*lib.Tsqlite3_file)(at(f)).FpMethods = orig
	if crc := cCall[func(*libc.TLS, uintptr) int32]((*lib.Tsqlite3_io_methods)(at(orig)).FxClose)(tls, f); rc == lib.SQLITE_OK {
		rc = crc
	}
	return rc
}

func file(f uintptr) *walFile { return (*walFile)(at(f + uintptr(walVFS.unixSz))) }

func origMethods(w *walFile) *lib.Tsqlite3_io_methods {
	return (*lib.Tsqlite3_io_methods)(at(w.orig))
}

// rwFunc is xRead's and xWrite's signature.
type rwFunc = func(*libc.TLS, uintptr, uintptr, int32, int64) int32

// cFunc is a Go function as SQLite's C (modernc's translation) calls it:
// the function value's pointer (golang.org/s/go11func), as modernc's
// generated code makes one. f must be a top-level function.
func cFunc[T any](f T) uintptr { return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f})) }

// cCall is cFunc's inverse: the C function pointer fp as a Go function
// of type T, to call.
func cCall[T any](fp uintptr) T { return *(*T)(unsafe.Pointer(&fp)) }

// at is the C memory at p as a pointer; it is not Go's, so no collector
// moves or frees it.
func at(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
