// Command dynamic is linked against the C library: cgo, and a C call.
package main

// #include <stdlib.h>
import "C"

func main() { C.abs(1) }
