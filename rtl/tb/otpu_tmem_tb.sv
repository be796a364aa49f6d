// otpu_tmem_tb: the single-copy TMEM (IMPL 3) with two read ports and one write port, through a
// bank conflict and its replay. Read port 0 reads words 0..3 and port 1 words 4..7 in the same
// cycle: every lane of port 1 loses its bank to port 0, so port 1 is denied and replays the next
// cycle. Meanwhile the write port writes word 8 (no reader waits for it), or with +violate word 5,
// which port 1 waits for: the replay precondition, whose assertion must stop the simulation.
// Prints "gnt0 G0 gnt1 G1 gnt1_replay G2 data D4 D5 D6 D7 deny N" when it finishes.
module otpu_tmem_tb;
  localparam int LANES = 4;
  logic clk = 0;
  always #1 clk = ~clk;

  logic [1:0][LANES-1:0]       rd_en;
  logic [1:0][LANES-1:0][31:0] rd_addr;
  logic [1:0]                  rd_gnt;
  logic [1:0][LANES-1:0][31:0] rd_data;
  logic [0:0][LANES-1:0]       wr_en;
  logic [0:0][LANES-1:0][31:0] wr_addr, wr_data;
  logic [31:0]                 deny_count;
  logic [1:0]                  gnt_first;
  logic                        gnt_replay;

  otpu_tmem #(.WORDS(64), .LANES(LANES), .NR(2), .NW(1), .IMPL(3)) u_tmem (
    .clk, .rd_en, .rd_addr, .rd_gnt, .rd_data, .wr_en, .wr_addr, .wr_data, .deny_count);

  initial begin
    bit violate;
    violate = $test$plusargs("violate");
    for (int i = 0; i < 64; i++) u_tmem.mem[i] = 32'h100 + i;
    rd_en = '0; wr_en = '0; rd_addr = '0; wr_addr = '0; wr_data = '0;
    @(negedge clk);
    for (int l = 0; l < LANES; l++) begin
      rd_addr[0][l] = l;
      rd_addr[1][l] = LANES + l;
    end
    rd_en = '1;
    @(posedge clk) gnt_first = rd_gnt;
    @(negedge clk);                               // port 1 replays alone, the write port writes
    rd_en[0] = '0;
    wr_en[0][0] = 1'b1;
    wr_addr[0][0] = violate ? 32'd5 : 32'd8;
    wr_data[0][0] = 32'hDEAD;
    @(posedge clk) gnt_replay = rd_gnt[1];
    @(negedge clk);
    $display("gnt0 %0d gnt1 %0d gnt1_replay %0d data %0h %0h %0h %0h deny %0d", gnt_first[0], gnt_first[1],
             gnt_replay, rd_data[1][0], rd_data[1][1], rd_data[1][2], rd_data[1][3], deny_count);
    $finish;
  end
endmodule
