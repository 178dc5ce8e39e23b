package main

import "unsafe"

// unsafePointer hands a kernel struct's address to a raw system call.
func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
