package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// byteSize is a flag of bytes written as a Kubernetes quantity (10Gi, 500M, 1024).
type byteSize int64

func (b *byteSize) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *byteSize) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("want a size such as 10Gi or 500Mi: %w", err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("want a positive whole number of bytes, got %q", v)
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) Type() string { return "size" }

// quantityFlag is a resource quantity flag; unset leaves nil.
type quantityFlag struct{ q **resource.Quantity }

func (f quantityFlag) String() string {
	if f.q == nil || *f.q == nil {
		return ""
	}
	return (*f.q).String()
}

func (f quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("quantity %q: %w", s, err)
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("quantity %q is not positive", s)
	}
	*f.q = &q
	return nil
}

func (f quantityFlag) Type() string { return "quantity" }
