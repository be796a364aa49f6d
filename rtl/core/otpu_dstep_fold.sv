// otpu_dstep_fold: the RDOT fold of 64 partials, p[i] += p[i + n] for n = 32 .. 1, NL pairs a
// cycle; `valid` holds p[0] until `ack`, and a new set loads in the cycle the last is taken.
module otpu_dstep_fold
#(
  parameter int NL = 8
) (
  input  logic               clk,
  input  logic               rst,
  input  logic               load,
  input  logic [63:0][31:0]  in_p,
  output logic               free,
  output logic               valid,
  input  logic               ack,
  output logic [31:0]        y
);
  logic [63:0][31:0] p;
  logic        run;
  logic [31:0] n, i;                         // pairs of this level (0: done), first pair of this cycle
  logic [NL-1:0][31:0] f_y;
  for (genvar l = 0; l < NL; l++) begin : g_f
    otpu_fp_add u_f (.a(p[6'(i + l)]), .b(p[6'(i + l + n)]), .sub(1'b0), .y(f_y[l]));
  end
  assign valid = run && n == 0;
  assign free = !run || (valid && ack);
  assign y = p[0];
  always_ff @(posedge clk) begin
    if (rst) run <= 1'b0;
    else begin
      if (run && n != 0) begin
        for (int l = 0; l < NL; l++) if (i + 32'(l) < n) p[6'(i + 32'(l))] <= f_y[l];
        if (i + NL >= n) begin n <= n >> 1; i <= 0; end
        else i <= i + NL;
      end
      if (valid && ack) run <= 1'b0;
      if (load) begin
        p <= in_p;
        run <= 1'b1;
        n <= 32;
        i <= 0;
      end
    end
  end
endmodule
