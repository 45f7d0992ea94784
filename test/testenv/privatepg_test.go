package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestPrivatePostgresRestart(t *testing.T) {
	ctx := context.Background()
	p, err := StartPrivatePostgres(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Down(ctx)
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
}
