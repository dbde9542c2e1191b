//go:build ember_in_repo && !ember_shared

package ember

// The link inside this repository (`-tags ember_in_repo`, as go.mk and the Dockerfile build): ember's static
// library, so that a Go program carries ember and needs no libember.so at run time. The archive comes from `cargo
// build --release --lib` in the repository; a library built elsewhere (CARGO_TARGET_DIR) is found by
// CGO_LDFLAGS=-L<dir>/release, which cgo places ahead of these flags.
// `-l:libember.a` names the archive exactly, so the linker cannot take libember.so from the same directory. The
// system libraries are those `cargo rustc --release --lib --crate-type staticlib -- --print native-static-libs`
// lists (the same as c.mk's EMBER_STATIC_DEPS).

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: -L${SRCDIR}/../../target/release -l:libember.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
import "C"
