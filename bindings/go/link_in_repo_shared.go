//go:build ember_in_repo && ember_shared

package ember

// The link with `-tags ember_in_repo,ember_shared`: ember's shared library, found at run time through the rpath
// of the repository's cargo target directory. A library built elsewhere (CARGO_TARGET_DIR) is given with
// CGO_LDFLAGS="-L<dir>/release -Wl,-rpath,<dir>/release", which cgo places ahead of these flags.

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: -L${SRCDIR}/../../target/release -lember -Wl,-rpath,${SRCDIR}/../../target/release -lpthread -lm
import "C"
