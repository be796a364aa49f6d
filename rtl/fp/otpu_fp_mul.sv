// otpu_fp_mul: y = a * b as fp32.py mul: inputs flushed, the product rounded to nearest even on
// the IEEE grid (subnormal grid included), then flushed (so a product that rounds up to 2^-126
// is kept), any NaN result canonical. Combinational.
module otpu_fp_mul (
  input  logic [31:0] a,
  input  logic [31:0] b,
  output logic [31:0] y
);
  `include "otpu_fp_funcs.svh"

  logic [31:0] fa, fb;
  logic        sign;
  logic [47:0] p, m48, m_sh;
  logic signed [10:0] e;
  logic [5:0]  sh;
  logic        sticky_sh, g, s, up;
  logic [23:0] keep;
  logic [24:0] rounded;

  always_comb begin
    fa = ftz(a);
    fb = ftz(b);
    sign = fa[31] ^ fb[31];
    p = {24'd0, 1'b1, fa[22:0]} * {24'd0, 1'b1, fb[22:0]};
    m48 = p[47] ? p : p << 1;
    e = $signed({3'd0, fa[30:23]}) + $signed({3'd0, fb[30:23]}) - 11'sd126 - (p[47] ? 11'sd0 : 11'sd1);
    // results below the normal range are rounded on the subnormal grid: shift right first
    sh = e >= 1 ? 6'd0 : (e <= -48 ? 6'd49 : 6'(1 - e));
    if (sh >= 48) begin
      m_sh = 0;
      sticky_sh = m48 != 0;
    end else begin
      m_sh = m48 >> sh;
      sticky_sh = (m48 & ((48'd1 << sh) - 1)) != 0;
    end
    keep = m_sh[47:24];
    g = m_sh[23];
    s = (m_sh[22:0] != 0) | sticky_sh;
    up = g & (s | keep[0]);
`ifdef OTPU_MUTANT_MUL_CARRY
    rounded = {2'b00, keep[22:0]} + {24'd0, up};   // planted bug: the carry into the leading bit is dropped
`else
    rounded = {1'b0, keep} + {24'd0, up};
`endif
    if (is_nan(fa) || is_nan(fb) || (fa[30:23] == 8'hFF && fb[30:0] == 0) || (fb[30:23] == 8'hFF && fa[30:0] == 0))
      y = CANON_NAN;
    else if (fa[30:23] == 8'hFF || fb[30:23] == 8'hFF) y = {sign, 8'hFF, 23'd0};
    else if (fa[30:0] == 0 || fb[30:0] == 0) y = {sign, 31'd0};
    else if (e < 1) y = rounded[23] ? {sign, 8'd1, 23'd0} : {sign, 31'd0};
    else if (rounded[24]) y = e + 1 >= 255 ? {sign, 8'hFF, 23'd0} : {sign, 8'(e + 1), 23'd0};
    else if (e >= 255) y = {sign, 8'hFF, 23'd0};
    else y = {sign, e[7:0], rounded[22:0]};
  end
endmodule
