//go:build !ember_in_repo

package ember

// The default link: the installed library, as a Go program outside this repository builds against it. `make
// install PREFIX=...` writes ember.pc, and cgo asks pkg-config for the header's and the library's flags
// (PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig when the prefix is not one pkg-config searches). ember.pc's Libs name
// -lember, so the program loads libember.so.MAJOR at run time: from the loader's path, or from an rpath given with
// CGO_LDFLAGS="-Wl,-rpath,$PREFIX/lib". Inside the repository, `-tags ember_in_repo` links target/release instead
// (link_in_repo_static.go, link_in_repo_shared.go; go.mk and the Dockerfile do).

// #cgo pkg-config: ember
import "C"
