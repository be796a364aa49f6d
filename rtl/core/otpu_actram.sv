// otpu_actram: the ACT RAM: ROWS rows x BLOCKS D-blocks of int8 activation codes, with one fp32
// scale and one 16-bit sub-block offset word (QACT SUB; 0 without) per (row, block). The
// quantiser writes one (row, block) per cycle, with `wdup` (QACT DUP) the same block of row
// `wrow2` too; the MXU reads one block of every row per cycle, each row at its own block index
// (MM PAIR reads the odd block of rows M..2M-1 beside the even block of rows 0..M-1).
module otpu_actram #(
  parameter int D = 32,
  parameter int ROWS = 2,
  parameter int BLOCKS = 16
) (
  input  logic                        clk,
  input  logic                        we,
  input  logic [$clog2(ROWS)-1:0]     wrow,
  input  logic [$clog2(BLOCKS)-1:0]   wblk,
  input  logic [D*8-1:0]              wq,
  input  logic [31:0]                 wscale,
  input  logic [15:0]                 wsub,
  input  logic                        wdup,
  input  logic [$clog2(ROWS)-1:0]     wrow2,
  input  logic [ROWS-1:0][$clog2(BLOCKS)-1:0] rblk,
  output logic [ROWS-1:0][D*8-1:0]    rq,
  output logic [ROWS-1:0][31:0]       rscale,
  output logic [ROWS-1:0][15:0]       rsub
);
  logic [D*8-1:0] q [ROWS][BLOCKS];
  logic [31:0] scale [ROWS][BLOCKS];
  logic [15:0] sub [ROWS][BLOCKS];

  always_ff @(posedge clk)
    if (we) begin
      q[wrow][wblk] <= wq;
      scale[wrow][wblk] <= wscale;
      sub[wrow][wblk] <= wsub;
      if (wdup) begin
        q[wrow2][wblk] <= wq;
        scale[wrow2][wblk] <= wscale;
        sub[wrow2][wblk] <= wsub;
      end
    end

  always_comb
    for (int r = 0; r < ROWS; r++) begin
      rq[r] = q[r][rblk[r]];
      rscale[r] = scale[r][rblk[r]];
      rsub[r] = sub[r][rblk[r]];
    end

  initial
    for (int r = 0; r < ROWS; r++)
      for (int b = 0; b < BLOCKS; b++) begin
        q[r][b] = '0;
        scale[r][b] = '0;
        sub[r][b] = '0;
      end
endmodule
