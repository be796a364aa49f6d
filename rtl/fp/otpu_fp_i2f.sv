// otpu_fp_i2f: a signed W-bit integer to fp32 with one round to nearest even (the MXU epilogue's
// i2f of exact block sums and 48-bit accumulators). Combinational.
module otpu_fp_i2f #(
  parameter int W = 48
) (
  input  logic signed [W-1:0] i,
  output logic [31:0]         y
);
  localparam int LW = $clog2(W + 1);
  logic [W-1:0] mag, norm;
  logic [LW-1:0] lz;
  logic [23:0] keep;
  logic g, s, up;
  logic [24:0] rounded;
  logic [8:0] e;

  always_comb begin
    mag = i[W-1] ? -i : i;             // -2^(W-1) wraps to 2^(W-1), as wanted
    lz = 0;
    for (int b = 0; b < W; b++) if (mag[b]) lz = LW'(W - 1 - b);       // the highest set bit wins
    norm = mag << lz;                  // leading one at W-1
    keep = norm[W-1 -: 24];
    g = W > 24 ? norm[W-25] : 1'b0;
    s = W > 25 ? (norm & ((W'(1) << (W - 25)) - 1)) != 0 : 1'b0;
    up = g & (s | keep[0]);
    rounded = {1'b0, keep} + {24'd0, up};
    e = 9'(127 + W - 1) - 9'(lz) + (rounded[24] ? 9'd1 : 9'd0);
    if (mag == 0) y = 32'd0;
    else y = {i[W-1], e[7:0], rounded[24] ? 23'd0 : rounded[22:0]};
  end
endmodule
