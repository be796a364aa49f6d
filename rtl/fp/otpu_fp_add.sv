// otpu_fp_add: y = a + b (b negated when sub) as fp32.py add/sub: inputs flushed to zero, IEEE
// round to nearest even, output flushed, any NaN result canonical. Combinational.
//
// The exact sum of two normal numbers that is below 2^-126 is representable on the subnormal
// grid, so a result that normalises below exponent 1 is exact and simply flushes.
module otpu_fp_add (
  input  logic [31:0] a,
  input  logic [31:0] b,
  input  logic        sub,
  output logic [31:0] y
);
  `include "otpu_fp_funcs.svh"

  logic [31:0] fa, fb;
  logic        sa, sb, sx, sy, eff_sub, a_big;
  logic [7:0]  ex, ey;
  logic [7:0]  d;
  logic [26:0] mx, my, my_sh;   // 1.23 mantissa with guard, round, sticky
  logic [27:0] sum;
  logic [4:0]  lz;
  logic [27:0] norm;
  logic signed [9:0] e_norm;
  logic [23:0] keep;
  logic        g, r, s, up;
  logic [24:0] rounded;
  logic signed [9:0] e_out;

  always_comb begin
    fa = ftz(a);
    fb = ftz(b) ^ {sub, 31'd0};
    sa = fa[31];
    sb = fb[31];
    a_big = fa[30:0] >= fb[30:0];
    sx = a_big ? sa : sb;
    sy = a_big ? sb : sa;
    ex = a_big ? fa[30:23] : fb[30:23];
    ey = a_big ? fb[30:23] : fa[30:23];
    mx = {ex != 0, (a_big ? fa[22:0] : fb[22:0]), 3'b000};
    my = {ey != 0, (a_big ? fb[22:0] : fa[22:0]), 3'b000};
    eff_sub = sx ^ sy;
    d = ex - ey;
    // align the smaller operand, folding everything shifted out into the sticky bit
    if (d >= 27) my_sh = {26'd0, my != 0};
    else my_sh = (my >> d) | {26'd0, (my & ((27'd1 << d) - 1)) != 0};
    sum = eff_sub ? {1'b0, mx} - {1'b0, my_sh} : {1'b0, mx} + {1'b0, my_sh};
    lz = 0;
    for (int i = 0; i <= 27; i++) if (sum[i]) lz = 5'(27 - i);          // the highest set bit wins
    // leading one to bit 27 (a carry is already there; a deep cancellation moves the sticky
    // bit up, which is exact: it only happens when no bit was shifted out)
    norm = sum << lz;
    e_norm = $signed({2'b00, ex}) + 10'sd1 - $signed({5'd0, lz});
    // norm[27] is the leading one: keep [27:4], guard [3], round [2], sticky [1:0]
    keep = norm[27:4];
    g = norm[3];
    r = norm[2];
    s = norm[1] | norm[0];
`ifdef OTPU_MUTANT_ADD_ROUND
    up = 1'b0;                      // planted bug: truncate instead of rounding to nearest even
`else
    up = g & (r | s | keep[0]);
`endif
    rounded = {1'b0, keep} + {24'd0, up};
    e_out = rounded[24] ? e_norm + 1 : e_norm;
    if (is_nan(fa) || is_nan(fb) || (fa[30:0] == 31'h7F800000 && fb[30:0] == 31'h7F800000 && sa != sb))
      y = CANON_NAN;
    else if (fa[30:23] == 8'hFF) y = fa;
    else if (fb[30:23] == 8'hFF) y = fb;
    else if (fa[30:0] == 0 && fb[30:0] == 0) y = {sa & sb, 31'd0};
    else if (sum == 0) y = 32'd0;                       // exact cancellation: +0
    else if (e_out <= 0) y = {sx, 31'd0};              // subnormal result: flushed
    else if (e_out >= 255) y = {sx, 8'hFF, 23'd0};
    else y = {sx, e_out[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
  end
endmodule
